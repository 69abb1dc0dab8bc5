"""/run start's `target:` autocompletes the workspace's compute targets from the daemon: its registered Slurm
clusters (`slurm:<cluster>`) beside the fixed lanes, for whoever may read the workspace, and none for a person who
may not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.bot.test_discord_bot import running_bot, world
from tests.support.discord_standin import ALICE_ID, BOB_ID

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(120)
async def test_run_start_offers_the_workspaces_slurm_clusters_as_targets(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    async with world(tmp_path, BASHGYM_SLURM_SHARED_ROOT=str(shared)) as w, running_bot(w):
        async with w.admin() as admin:
            cluster = {
                "cluster_id": "hpc",
                "kind": "slurm",
                "partition": "debug",
                "time_limit_min": 5,
                "shared_dir": str(shared),
            }
            added = await admin.post("/v1/clusters", json=cluster)
            assert added.status_code == 201, added.text

        async def offered(current: str, user_id: int) -> list[str]:
            typed = await w.standin.autocomplete(
                "run start", "target", current, {"project": "nightly"}, user_id=user_id
            )
            return [c["value"] for c in (await w.standin.wait_for_callback(typed)).data["choices"]]

        assert await offered("", ALICE_ID) == ["local", "slurm:hpc", "cloud:nemo-customizer"]
        assert await offered("slu", ALICE_ID) == ["slurm:hpc"]
        # Bob may read nothing in the workspace: no cluster of it is named to him.
        assert "slurm:hpc" not in await offered("", BOB_ID)
