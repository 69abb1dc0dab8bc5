"""A run started from Discord keeps the project its user chose: recorded there with a complete tracking context
composed from the project's registered versions, judged against that project's grants, found by `/run status`
and announced in that project's channel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.bot.test_discord_bot import World, running_bot, text_of, world
from tests.support.discord_standin import ALICE_ID, BOB_ID, CHANNEL_ID, EPHEMERAL, RUNS_CHANNEL_ID, TRAINER_ROLE_ID
from tests.support.factories import sft_data
from tests.support.helpers import cli_async

pytestmark = pytest.mark.anyio
CONFIG = {"max_steps": 2, "batch_size": 4, "learning_rate": 5e-3, "max_seq_length": 128, "save_steps": 2}


async def register_versions(w: World) -> None:
    env = w.daemon.env()
    tiny = await asyncio.to_thread(build_tiny, w.tmp / "tiny")
    model = await cli_async(
        env, "model", "register", "--project", "nightly", "--model", "tiny", "--version", "tiny-v1", "--dir", str(tiny)
    )
    assert model.code == 0, model.stderr
    data = sft_data(w.tmp, rows=8)
    dataset = await cli_async(
        env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version", "traces-v1",
        "--file", str(data),
    )  # fmt: skip
    assert dataset.code == 0, dataset.stderr


def field(message: dict[str, object], name: str) -> str:
    embeds = message["embeds"]
    assert isinstance(embeds, list)
    return str(next(f["value"] for f in embeds[0]["fields"] if f["name"] == name))


@pytest.mark.timeout(300)
async def test_a_run_started_in_a_project_is_recorded_there_for_a_researcher_of_that_project_only(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w, running_bot(w):
        await register_versions(w)
        env = w.daemon.env()
        # Bob may launch in nightly and nowhere else; nightly's notices go to the runs channel.
        granted = await cli_async(
            env, "authority", "grant", "--discord-user", str(BOB_ID), "--profile", "researcher", "--project", "nightly"
        )
        assert granted.code == 0, granted.stderr
        async with w.admin() as admin:
            routed = await admin.put("/v1/projects/nightly/channel", json={"channel_id": str(RUNS_CHANNEL_ID)})
            assert routed.is_success, routed.text
            hidden = await admin.post("/v1/projects", json={"project_id": "secret", "name": "Secret"})
            assert hidden.is_success, hidden.text
        # What Bob is offered to type is what Bob may read: never another project's name.
        typed = await w.standin.autocomplete("run start", "project", "", user_id=BOB_ID)
        offered = [c["value"] for c in (await w.standin.wait_for_callback(typed)).data["choices"]]
        assert "nightly" in offered and "secret" not in offered, offered
        typed = await w.standin.autocomplete("project context", "project", "", user_id=ALICE_ID)
        assert "secret" in [c["value"] for c in (await w.standin.wait_for_callback(typed)).data["choices"]]
        # A role's grant counts for whoever holds the role, in the guild, and only while they hold it.
        role = await cli_async(env, "authority", "grant", "--discord-role", str(TRAINER_ROLE_ID), "--profile",
                               "viewer", "--project", "secret")  # fmt: skip
        assert role.code == 0, role.stderr
        typed = await w.standin.autocomplete(
            "project context", "project", "", user_id=BOB_ID, role_ids=[TRAINER_ROLE_ID]
        )
        offered = [c["value"] for c in (await w.standin.wait_for_callback(typed)).data["choices"]]
        assert {"nightly", "secret"} <= set(offered), offered
        context = await w.slash("project context", user_id=BOB_ID, role_ids=[TRAINER_ROLE_ID], project="secret")
        assert "Project Secret" in text_of(context), text_of(context)
        refused = await w.slash("project context", user_id=BOB_ID, project="secret")
        assert refused["flags"] & EPHEMERAL and "lacks" in text_of(refused)

        launch = {"project": "nightly", "method": "sft", "model": "tiny-v1", "dataset": "traces-v1",
                  "config": ("config.json", json.dumps(CONFIG).encode())}  # fmt: skip
        queued = await w.slash("run start", user_id=BOB_ID, **launch)
        assert not queued["flags"] & EPHEMERAL, text_of(queued)
        run_id = field(queued, "run_id")
        assert (field(queued, "project_id"), field(queued, "context_status")) == ("nightly", "verified")
        assert field(queued, "experiment_id") == "adhoc"

        status = await w.slash("run status", user_id=BOB_ID, project="nightly", run=run_id)
        assert run_id in text_of(status) and "No run" not in text_of(status)
        started = await w.standin.wait_for_message(
            RUNS_CHANNEL_ID, lambda m: f"Run started: {run_id}" in text_of(m), timeout_s=60
        )
        assert "tiny-v1" in text_of(started) and "traces-v1" in text_of(started)
        print("\n" + text_of(queued) + "\n\n" + text_of(started))  # README shows these
        notices = [text_of(m) for m in w.standin.messages(CHANNEL_ID) if "Run started" in text_of(m)]
        assert not any(run_id in n for n in notices), "not in the default channel"

        async with w.admin() as admin:
            run = (await admin.get(f"/v1/projects/nightly/runs/{run_id}")).json()
        assert (run["model_version_id"], run["dataset_version_id"]) == ("tiny-v1", "traces-v1")
        assert run["launched_by"] == f"discord:{BOB_ID}"

        # /project context: what a lead wants at a glance, every part filled from the daemon's answer.
        context = await w.slash("project context", user_id=BOB_ID, project="nightly")
        fields = {f["name"]: f["value"] for f in context["embeds"][0]["fields"]}
        assert set(fields) == {
            "Health", "Inventory", "Latest runs", "Champion and aliases", "Open campaigns", "Last decisions"
        }  # fmt: skip
        assert run_id in fields["Latest runs"] and "sft" in fields["Latest runs"]
        assert "1 run (" in fields["Inventory"] and "1 model version" in fields["Inventory"]
        assert fields["Champion and aliases"] == "no alias yet" and fields["Open campaigns"] == "none"
        assert context["embeds"][0]["title"] == "Project Nightly SFT (nightly)"

        # A gate verdict asked for in Discord is recorded and posted in the project's channel, once per evidence.
        await w.standin.wait_for_message(
            RUNS_CHANNEL_ID, lambda m: f"Run completed: {run_id}" in text_of(m), timeout_s=120
        )
        asked = await w.slash("promote gate", user_id=BOB_ID, project="nightly", run=run_id)
        assert "blocked" in text_of(asked)
        posted = await w.standin.wait_for_message(
            RUNS_CHANNEL_ID, lambda m: f"Gate: run {run_id} is blocked" in text_of(m), timeout_s=30
        )
        assert "no_evaluation" in text_of(posted) and "Next: bashgym eval run" in text_of(posted)
        print("\n" + text_of(posted))
        assert f"discord:{BOB_ID} (a look at the gate)" in text_of(posted)
        await w.slash("promote gate", user_id=BOB_ID, project="nightly", run=run_id)
        async with w.admin() as admin:
            events = (await admin.get("/v1/projects/nightly/events", params={"type": "gate.evaluated"})).json()
        same = [e for e in events["events"] if e["run_id"] == run_id]
        assert len(same) == 1, "a second look at the same evidence records nothing new"
        assert same[0]["payload"]["ship"] is False and same[0]["payload"]["asked_by"] == "gate"
        print("\n" + context["embeds"][0]["title"] + "\n" + "\n".join(f"{k}: {v}" for k, v in fields.items()))


@pytest.mark.timeout(300)
async def test_a_launch_that_cannot_be_identified_is_refused_saying_what_to_register(tmp_path: Path) -> None:
    async with world(tmp_path) as w, running_bot(w):
        await register_versions(w)
        unknown = await w.slash("run start", project="nightly", method="sft", model="org/llama", dataset="traces-v1")
        assert unknown["flags"] & EPHEMERAL
        assert "org/llama" in text_of(unknown) and "register" in text_of(unknown)
        with_context = {"tracking_context": {"project_id": "other"}}
        both = await w.slash(
            "run start", project="nightly", method="sft", model="tiny-v1", dataset="traces-v1",
            config=("config.json", json.dumps(with_context).encode()),
        )  # fmt: skip
        assert both["flags"] & EPHEMERAL and "not both" in text_of(both)
        async with w.admin() as admin:
            runs = (await admin.get("/v1/projects/nightly/runs")).json()
        assert runs == [] or runs.get("runs") == [], "nothing was launched"


@pytest.mark.timeout(300)
async def test_stop_answers_at_once_then_says_how_it_ended_and_the_notice_names_who_stopped_it(tmp_path: Path) -> None:
    async with world(tmp_path) as w, running_bot(w):
        await register_versions(w)
        async with w.admin() as admin:
            routed = await admin.put("/v1/projects/nightly/channel", json={"channel_id": str(CHANNEL_ID)})
            assert routed.is_success, routed.text
        long = {**CONFIG, "max_steps": 20_000, "save_steps": 10_000}
        launch = {"project": "nightly", "method": "sft", "model": "tiny-v1", "dataset": "traces-v1",
                  "config": ("config.json", json.dumps(long).encode())}  # fmt: skip
        run_id = field(await w.slash("run start", **launch), "run_id")
        prompt = await w.slash("run stop", project="nightly", run=run_id)  # at once: still loading, or running
        pressed = await w.standin.click(prompt, "confirm", user_id=ALICE_ID)
        await w.standin.wait_until(lambda: pressed.followup_ids or None, timeout_s=10, what="the first answer")
        first = w.standin.message(pressed.followup_ids[0])
        assert text_of(first).startswith(f"Stopping run {run_id}…"), text_of(first)
        ended = await w.standin.wait_until(
            lambda: "cancelled" in text_of(w.standin.message(pressed.followup_ids[0])) or None,
            timeout_s=90,
            what="the answer edited once the run ended",
        )
        assert ended
        final = text_of(w.standin.message(pressed.followup_ids[0]))
        assert f"Run {run_id} cancelled" in final and f"stopped by discord:{ALICE_ID} (/run stop in Discord)" in final
        notice = await w.standin.wait_for_message(
            CHANNEL_ID, lambda m: f"Run cancelled: {run_id}" in text_of(m), timeout_s=30
        )
        assert f"by discord:{ALICE_ID} (/run stop in Discord)" in text_of(notice)

        # /run log: a progress bar's carriage returns redraw one line, as in a terminal.
        log = w.daemon.home / "runs" / run_id / "training.log"
        with log.open("a") as out:
            out.write("\r 10%|#         | 1/10\r 50%|#####     | 5/10\r100%|##########| 10/10\n")
        shown = text_of(await w.slash("run log", project="nightly", run=run_id, lines=3))
        assert "100%|##########| 10/10" in shown and "50%|" not in shown and "\r" not in shown


def test_a_log_reads_as_a_terminal_shows_it() -> None:
    from bashgym.daemon.api.training import as_terminal

    tqdm = "\r  0%|          | 0/4 [00:00<?, ?it/s]\r 50%|#####     | 2/4\r100%|##########| 4/4 [00:01]"
    assert as_terminal(["step 1", tqdm, "\x1b[32mdone\x1b[0m", "\r"]) == [
        "step 1",
        "100%|##########| 4/4 [00:01]",
        "done",
    ]
