"""The Slurm cluster registry end to end: `bashgym cluster add/list/show/remove` against a real daemon, what a
tenant may name (a shared directory only under the operator's root, Slurm names only), who may change it, and
`training plan` showing the lane. No Slurm needed: nothing is submitted here (tests/e2e/slurm/ submits)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.factories import sft_data
from tests.support.helpers import RunningDaemon, cli, running_daemon


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slurm-shared")
    (root / "team").mkdir()
    return root


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, shared_root: Path) -> Iterator[RunningDaemon]:
    home = tmp_path_factory.mktemp("home")
    with running_daemon(home, env={"BASHGYM_SLURM_SHARED_ROOT": str(shared_root)}) as running:
        yield running


def add_args(name: str, shared_dir: str, *extra: str) -> list[str]:
    return [
        "cluster", "add", name, "--kind", "slurm", "--partition", "debug", "--time-limit", "30",
        "--shared-dir", shared_dir, *extra, "--json",
    ]  # fmt: skip


def token(daemon: RunningDaemon, profile: str, actor: str) -> str:
    with daemon.client() as admin:
        issued = admin.post("/v1/auth/tokens", json={"actor_id": actor, "profile": profile})
    assert issued.status_code == 201, issued.text
    return str(issued.json()["token"])


def test_a_cluster_is_added_listed_shown_and_removed(daemon: RunningDaemon, shared_root: Path) -> None:
    env = daemon.env()
    added = cli(env, *add_args("hpc", str(shared_root / "team"), "--account", "ml-lab", "--gpus-per-node", "2"))
    assert added.code == 0, added.stderr
    record = added.json()["record"]
    assert (record["access"], record["partition"], record["account"], record["gpus_per_node"]) == (
        "local", "debug", "ml-lab", 2
    )  # fmt: skip
    assert record["shared_dir"] == str((shared_root / "team").resolve())
    with daemon.client() as admin:
        same = spec("hpc", str(shared_root / "team"), account="ml-lab", gpus_per_node=2)
        assert admin.post("/v1/clusters", json=same).status_code == 200, "the same registration again is a replay"
        other = admin.post("/v1/clusters", json={**same, "account": "other"})
        assert other.status_code == 409 and "already registered with other settings" in other.text

        assert "hpc" in cluster_ids(admin)  # beside whatever the module's other tests registered
        assert admin.get("/v1/clusters/hpc").json()["time_limit_min"] == 30
    table = cli(env, "cluster", "list")
    assert table.code == 0 and "hpc" in table.stdout and "this host" in table.stdout

    assert cli(env, "cluster", "remove", "hpc", "--yes").code == 0
    gone = cli(env, "cluster", "show", "hpc")
    assert gone.code != 0 and "No cluster 'hpc'" in gone.stderr and "bashgym cluster list" in gone.stderr


def cluster_ids(client: httpx.Client) -> list[str]:
    return [c["cluster_id"] for c in client.get("/v1/clusters").json()["clusters"]]


def spec(name: str, shared_dir: str, **fields: object) -> dict[str, object]:
    return {"cluster_id": name, "partition": "debug", "time_limit_min": 30, "shared_dir": shared_dir, **fields}


def test_a_shared_dir_outside_the_operators_root_is_refused(daemon: RunningDaemon, shared_root: Path) -> None:
    link = shared_root / "escape"
    link.symlink_to("/tmp")
    with daemon.client() as admin:
        for shared_dir in ("/etc", str(link)):
            refused = admin.post("/v1/clusters", json=spec("evil", shared_dir))
            assert refused.status_code == 403, refused.text
            message = refused.json()["error"]["message"]
            assert "outside BASHGYM_SLURM_SHARED_ROOT" in message and str(shared_root) in message
        climbing = admin.post("/v1/clusters", json=spec("evil", f"{shared_root}/team/../../x"))
        assert climbing.status_code == 422 and "climbs out" in climbing.text
        assert "evil" not in cluster_ids(admin)


def test_slurm_names_that_could_carry_options_or_shell_are_refused(daemon: RunningDaemon, shared_root: Path) -> None:
    team = str(shared_root / "team")
    with daemon.client() as admin:
        for field, value in (
            ("partition", "debug --wrap=id"),
            ("account", "a;id"),
            ("qos", "$(id)"),
            ("gpu_type", "a100 --uid=0"),
            ("python", "python3;id"),
            ("shared_dir", f"{shared_root}/te am"),
            ("kind", "pbs"),
        ):
            refused = admin.post("/v1/clusters", json={**spec("evil", team), field: value})
            assert refused.status_code == 422, (field, value, refused.text)
            assert field in refused.text
        assert "evil" not in cluster_ids(admin)


def test_only_device_managers_change_the_registry(daemon: RunningDaemon, shared_root: Path) -> None:
    assert cli(daemon.env(), *add_args("hpc2", str(shared_root / "team"))).code == 0
    body = spec("mine", str(shared_root))
    for profile in ("viewer", "researcher"):
        with httpx.Client(
            base_url=daemon.url, headers={"Authorization": f"Bearer {token(daemon, profile, profile)}"}, timeout=30
        ) as tenant:
            assert tenant.get("/v1/clusters").status_code == 200, "reading the registry is a read"
            assert tenant.get("/v1/clusters/hpc2").json()["partition"] == "debug"
            added = tenant.post("/v1/clusters", json=body)
            assert added.status_code == 403 and "device.manage" in added.text, added.text
            removed = tenant.delete("/v1/clusters/hpc2")
            assert removed.status_code == 403, removed.text
    assert cli(daemon.env(), "cluster", "remove", "hpc2", "--yes").code == 0


def test_a_login_device_must_be_registered(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        refused = admin.post("/v1/clusters", json=spec("remote", "/scratch/bashgym", login_device_id="login1"))
    assert refused.status_code == 404 and "No device 'login1'" in refused.json()["error"]["message"], refused.text


def test_training_plan_shows_the_slurm_lane_and_its_job(
    daemon: RunningDaemon, shared_root: Path, tmp_path: Path
) -> None:
    env = daemon.env()
    assert cli(env, *add_args("plan1", str(shared_root / "team"), "--qos", "short", "--max-nodes", "2")).code == 0
    data = sft_data(tmp_path)
    plan = cli(
        env, "training", "plan", "--strategy", "sft", "--model", "org/model", "--dataset-path", str(data),
        "--compute-target", "slurm:plan1", "--json",
    )  # fmt: skip
    assert plan.code in {0, 7}, plan.stderr
    lane = plan.json()["verdict"]["lane_preflight"] if "verdict" in plan.json() else plan.json()["lane_preflight"]
    assert lane["lane"] == "slurm" and lane["ready"], lane
    facts = lane["facts"]
    assert facts["cluster_id"] == "plan1" and facts["nodes"] == 1
    assert {"--qos=short", "--partition=debug", "--time=30"} <= set(facts["sbatch"])
    assert "--requeue" in facts["sbatch"] and any(o.startswith("--signal=B:USR1@") for o in facts["sbatch"])

    inbox = daemon.home / "data"
    inbox.mkdir(exist_ok=True)
    body = {"method": "sft", "base_model": "org/model", "dataset_path": str(sft_data(inbox))}
    with daemon.client() as admin:
        unknown = admin.post("/v1/training/plan", json={**body, "compute_target": "slurm:nope"})
        assert "No cluster 'nope'" in unknown.text, unknown.text
        malformed = admin.post("/v1/training/plan", json={**body, "compute_target": "slurm:../x"})
        assert malformed.status_code == 422 and "does not name a cluster" in malformed.text
        scaled = {**body, "compute_target": "slurm:plan1", "num_machines": 3, "num_processes": 3}
        too_many = admin.post("/v1/training/plan", json=scaled)
        assert "more than cluster plan1 allows (2 nodes)" in too_many.text
