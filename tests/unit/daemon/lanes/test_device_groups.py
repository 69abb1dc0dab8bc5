"""Device groups in the ledger: members must be registered devices, replay versus conflict, the default main
address, a member device cannot be removed from under its group, and the environment digest is stable."""

from __future__ import annotations

from typing import Any

import pytest
from bashgym.client.errors import Conflict, InvalidInput, NotFound
from bashgym.client.specs import Actor, DeviceGroupSpec, DeviceSpec, PreflightVerdict
from bashgym.daemon.lanes.ssh import environment_digest
from bashgym.ledger.store import Ledger
from pydantic import ValidationError

pytestmark = pytest.mark.anyio
WS = "default"


def device(device_id: str, host: str = "10.0.0.1") -> DeviceSpec:
    return DeviceSpec(device_id=device_id, host=host, user="ml", key_path="/keys/id_ed25519")


def group(*members: str, **overrides: Any) -> DeviceGroupSpec:
    return DeviceGroupSpec.model_validate({"group_id": "pair", "members": list(members), **overrides})


async def two_devices(ledger: Ledger, actor: Actor) -> None:
    await ledger.add_device(actor, WS, device("gpu1", "10.0.0.1"))
    await ledger.add_device(actor, WS, device("gpu2", "10.0.0.2"))


async def test_a_group_is_registered_with_its_main_address_defaulting_to_the_first_members_host(
    ledger: Ledger, actor: Actor
) -> None:
    await two_devices(ledger, actor)
    written = await ledger.add_device_group(actor, WS, group("gpu2", "gpu1"))
    assert not written.replayed
    record = await ledger.get_device_group(WS, "pair")
    assert record == written.record
    assert {k: record[k] for k in ("group_id", "members", "main_process_ip", "main_process_port")} == {
        "group_id": "pair",
        "members": ["gpu2", "gpu1"],  # the order is the machine rank
        "main_process_ip": "10.0.0.2",
        "main_process_port": 29500,
    }
    assert (record["workspace_id"], record["ready"], record["preflight"], record["created_by"]) == (
        WS,
        False,
        None,
        "alice",
    )
    assert [g["group_id"] for g in await ledger.list_device_groups(WS)] == ["pair"]
    page = await ledger.events_page(WS, None, after_cursor=0, limit=100)
    assert [e.event_type for e in page.events][-1] == "device_group.registered"


async def test_the_same_group_again_is_a_replay_and_other_members_under_its_name_a_conflict(
    ledger: Ledger, actor: Actor
) -> None:
    await two_devices(ledger, actor)
    await ledger.add_device_group(actor, WS, group("gpu1", "gpu2"))
    again = await ledger.add_device_group(actor, WS, group("gpu1", "gpu2", main_process_ip="10.0.0.1"))
    assert again.replayed, "the default main address resolves to the same stored spec"
    with pytest.raises(Conflict, match="already registered with other settings") as refused:
        await ledger.add_device_group(actor, WS, group("gpu2", "gpu1"))
    assert "bashgym device group remove pair" in refused.value.hint


async def test_a_group_naming_an_unregistered_device_is_refused_naming_it(ledger: Ledger, actor: Actor) -> None:
    await ledger.add_device(actor, WS, device("gpu1"))
    with pytest.raises(InvalidInput, match="'gpu9' is not a registered device") as refused:
        await ledger.add_device_group(actor, WS, group("gpu1", "gpu9"))
    assert "bashgym device add gpu9" in refused.value.hint
    assert await ledger.list_device_groups(WS) == []


async def test_a_member_device_cannot_be_removed_until_its_group_is(ledger: Ledger, actor: Actor) -> None:
    await two_devices(ledger, actor)
    await ledger.add_device_group(actor, WS, group("gpu1", "gpu2"))
    with pytest.raises(Conflict, match="member of device group pair") as refused:
        await ledger.remove_device(actor, WS, "gpu2")
    assert "bashgym device group remove pair" in refused.value.hint
    removed = await ledger.remove_device_group(actor, WS, "pair")
    assert removed.record["members"] == ["gpu1", "gpu2"]
    with pytest.raises(NotFound, match="No device group 'pair'"):
        await ledger.get_device_group(WS, "pair")
    await ledger.remove_device(actor, WS, "gpu2")


async def test_a_group_preflight_is_stored_with_its_verdict_and_event(ledger: Ledger, actor: Actor) -> None:
    await two_devices(ledger, actor)
    await ledger.add_device_group(actor, WS, group("gpu1", "gpu2"))
    verdict = PreflightVerdict(ready=False, reasons=["gpu2 (rank 1) cannot reach 10.0.0.1:29500"], facts={"x": 1})
    written = await ledger.record_group_preflight(actor, WS, "pair", verdict)
    assert (written.record["ready"], written.record["preflight"]) == (False, verdict.model_dump())
    assert written.record["preflight_at"]
    event = (await ledger.events_page(WS, None, after_cursor=0, limit=100)).events[-1]
    assert event.event_type == "device_group.preflight"
    assert (event.payload["group_id"], event.payload["ready"]) == ("pair", False)
    with pytest.raises(NotFound):
        await ledger.record_group_preflight(actor, WS, "nope", verdict)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"members": ["gpu1"]}, "at least 2 items"),
        ({"members": [f"d{i}" for i in range(65)]}, "at most 64 items"),
        ({"members": ["gpu1", "gpu2", "gpu1"]}, "'gpu1' is listed twice"),
        ({"members": ["gpu1", "gpu2"], "main_process_port": 80}, "greater than or equal to 1024"),
        ({"members": ["gpu1", "gpu2"], "main_process_port": 70000}, "less than or equal to 65535"),
        ({"members": ["gpu1", "gpu2"], "main_process_ip": "10.0.0.1; rm -rf /"}, "should match pattern"),
        ({"members": ["gpu1", "gpu 2"]}, "is not a valid identifier"),
        ({"group_id": "a/b", "members": ["gpu1", "gpu2"]}, "is not a valid identifier"),
    ],
)
def test_a_group_spec_refuses_what_cannot_train_together(body: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        DeviceGroupSpec.model_validate({"group_id": "pair", **body})


def test_the_environment_digest_covers_what_must_match_across_ranks_and_nothing_else() -> None:
    facts = {
        "python": "3.11.9",
        "bashgym": "0.1.0",
        "torch": "2.13.0",
        "cuda_version": "12.4",
        "gpus": [{"index": 0, "name": "H200", "free_gib": 130.5, "total_gib": 139.8}],
        "disk_free_gib": 200.0,
        "executable": "/home/ml/bashgym-work/venv/bin/python",
    }
    digest = environment_digest(facts)
    assert len(digest) == 64
    elsewhere = {**facts, "python": "3.11.4", "disk_free_gib": 3.0, "executable": "/opt/venv/bin/python"}
    elsewhere["gpus"] = [{"index": 0, "name": "H200", "free_gib": 12.0, "total_gib": 139.8}]
    assert environment_digest(elsewhere) == digest, "patch release, free memory, disk and paths may differ"
    for key, value in [("torch", "2.12.0"), ("cuda_version", "12.1"), ("bashgym", "0.2.0"), ("python", "3.12.1")]:
        assert environment_digest({**facts, key: value}) != digest, key
    assert environment_digest({**facts, "gpus": [{"index": 0, "name": "A100"}]}) != digest
    # Pinned: the training side records it per member, so a change here is a change of its meaning.
    assert digest == environment_digest(dict(reversed(list(facts.items()))))
