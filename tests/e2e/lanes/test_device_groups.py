"""Device groups end to end: the daemon's API and CLI, two devices on a real asyncssh server on 127.0.0.1, and
the group preflight's rendezvous check over loopback."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.client.specs import PreflightVerdict
from bashgym.daemon.lanes import group_preflight
from bashgym.daemon.lanes.group_preflight import preflight_group
from bashgym.daemon.lanes.ssh import Device
from bashgym.daemon.training import TrainingService
from bashgym.ledger.store import Ledger

from tests.support.helpers import cli_async, inprocess_daemon, running_daemon
from tests.support.ssh_standin import SshServer, ssh_server

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def taken(port: int) -> Iterator[None]:
    """Someone else listens on the port, as a leftover process on the main machine would."""
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", port))
        squatter.listen(1)
        yield


def is_free(port: int) -> bool:
    """Nothing listens on the port (SO_REUSEADDR: connections closing in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


@dataclass
class Groups:
    api: httpx.AsyncClient
    ssh: SshServer

    async def add_devices(self, *device_ids: str, **overrides: Any) -> None:
        for device_id in device_ids:
            added = await self.api.post("/v1/devices", json=self.ssh.device(device_id, **overrides))
            assert added.status_code == 201, added.text


@pytest.fixture
async def groups(ledger: Ledger, tmp_path: Path) -> AsyncIterator[Groups]:
    async with ssh_server(tmp_path / "ssh") as ssh, inprocess_daemon(ledger, tmp_path / "home") as api:
        yield Groups(api, ssh)


async def test_a_group_of_two_devices_preflights_ready_over_loopback_and_leaves_no_listener(groups: Groups) -> None:
    await groups.add_devices("gpu1", "gpu2")
    port = free_port()
    created = await groups.api.post("/v1/device-groups", json={"group_id": "pair", "members": ["gpu1", "gpu2"]})
    assert created.status_code == 201, created.text
    assert (created.json()["record"]["main_process_ip"], created.json()["record"]["main_process_port"]) == (
        "127.0.0.1",
        29500,
    ), "the main address defaults to the first member's host"
    await groups.api.delete("/v1/device-groups/pair")
    body = {"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_port": port}
    assert (await groups.api.post("/v1/device-groups", json=body)).status_code == 201

    checked = await groups.api.post("/v1/device-groups/pair/preflight")
    assert checked.status_code == 201, checked.text
    record = checked.json()["record"]
    assert record["ready"], record["preflight"]["reasons"]
    members = record["preflight"]["facts"]["members"]
    assert [(m["device_id"], m["machine_rank"], m["ready"]) for m in members] == [("gpu1", 0, True), ("gpu2", 1, True)]
    assert members[0]["env_digest"] == members[1]["env_digest"] and len(members[0]["env_digest"]) == 64
    rendezvous = record["preflight"]["facts"]["rendezvous"]
    assert (rendezvous["address"], rendezvous["port"], rendezvous["listening"]) == ("127.0.0.1", port, True)
    assert [(c["device_id"], c["reached"]) for c in rendezvous["members"]] == [("gpu2", True)]
    assert is_free(port), "the listener ended with the check"
    assert record["preflight"]["facts"]["shared_work_dirs"] == []
    assert not list(groups.ssh.home.rglob(".bashgym-storage-*")), "each member's storage marker is removed"

    for device_id in ("gpu1", "gpu2"):  # each member's own verdict is stored on its device too
        device = (await groups.api.get(f"/v1/devices/{device_id}")).json()
        assert device["ready"] and device["preflight"]["facts"]["torch"]
    shown = (await groups.api.get("/v1/device-groups/pair")).json()
    assert shown["ready"] and shown["preflight_at"]
    events = (await groups.api.get("/v1/events", params={"limit": 1000})).json()["events"]
    assert "device_group.preflight" in [e["event_type"] for e in events]
    checks = {c["check"]: c for c in (await groups.api.get("/v1/doctor")).json()["checks"]}
    assert checks["lane ssh-group:pair"]["ready"], "doctor lists the group as a lane"
    assert checks["lane ssh-group:pair"]["detail"] == "gpu1, gpu2: ready at the last preflight"


async def test_a_port_taken_on_the_main_member_makes_the_group_not_ready_naming_the_port(groups: Groups) -> None:
    await groups.add_devices("gpu1", "gpu2")
    port = free_port()
    body = {"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_port": port}
    await groups.api.post("/v1/device-groups", json=body)
    with taken(port):
        record = (await groups.api.post("/v1/device-groups/pair/preflight")).json()["record"]
    assert not record["ready"]
    assert record["preflight"]["reasons"] == [
        f"port {port} is in use on gpu1 (rank 0, the main process's machine); free it there, or re-create the "
        "group with another --main-port"
    ]
    assert record["preflight"]["facts"]["rendezvous"]["port_in_use"]
    assert is_free(port), "the check's own listener never stayed"
    assert (await groups.api.get("/v1/devices/gpu2")).json()["ready"], "the members themselves are fine"


async def test_members_sharing_one_work_directory_are_named_and_the_group_not_ready(groups: Groups) -> None:
    """Two hosts mounting one home over NFS look like this: different devices, one directory."""
    await groups.add_devices("gpu1", "gpu2", "gpu3", work_dir="work-shared")
    await groups.add_devices("gpu4")
    body = {"group_id": "four", "members": ["gpu1", "gpu2", "gpu3", "gpu4"], "main_process_port": free_port()}
    await groups.api.post("/v1/device-groups", json=body)
    record = (await groups.api.post("/v1/device-groups/four/preflight")).json()["record"]
    assert not record["ready"]
    assert record["preflight"]["reasons"] == [
        "gpu1, gpu2, gpu3 share one work directory (the same disk under the same path); each member needs a "
        "work_dir of its own, or their run files (exit codes, process groups, checkpoints) overwrite each other's: "
        "re-add all but one with another --work-dir (remove the group first)"
    ]
    assert record["preflight"]["facts"]["shared_work_dirs"] == [["gpu1", "gpu2", "gpu3"]]
    assert not list(groups.ssh.home.rglob(".bashgym-storage-*"))


async def test_a_member_that_cannot_reach_the_main_address_is_named(groups: Groups) -> None:
    """The listener binds IPv4 only, so ::1 stands for an address a firewall closes: refused, at once."""
    await groups.add_devices("gpu1", "gpu2")
    port = free_port()
    body = {"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_ip": "::1", "main_process_port": port}
    await groups.api.post("/v1/device-groups", json=body)
    record = (await groups.api.post("/v1/device-groups/pair/preflight")).json()["record"]
    assert not record["ready"]
    (reason,) = record["preflight"]["reasons"]
    assert reason.startswith(f"gpu2 (rank 1) cannot reach [::1]:{port}: ")
    hint = f"open port {port} on gpu1 to the other members, or re-create the group with a --main-address they can"
    assert reason.endswith(f"{hint} reach")
    assert record["preflight"]["facts"]["rendezvous"]["listening"] and is_free(port)


async def test_a_member_that_cannot_run_its_python_is_named_and_not_probed(groups: Groups) -> None:
    await groups.add_devices("gpu1")
    await groups.add_devices("gpu2", python="work-gpu2/venv/bin/python")
    body = {"group_id": "pair", "members": ["gpu1", "gpu2"], "main_process_port": free_port()}
    await groups.api.post("/v1/device-groups", json=body)
    record = (await groups.api.post("/v1/device-groups/pair/preflight")).json()["record"]
    assert not record["ready"]
    (reason,) = record["preflight"]["reasons"]
    assert reason.startswith("gpu2 (rank 1) is not ready: python `work-gpu2/venv/bin/python` was not found")
    (check,) = record["preflight"]["facts"]["rendezvous"]["members"]
    assert (check["device_id"], check["reached"]) == ("gpu2", None)


async def test_members_that_differ_in_torch_or_gpus_are_named(
    groups: Groups, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two torch builds and a GPU-less member cannot run on one loopback host; their facts stand in."""
    facts = {"python": "3.11.9", "bashgym": "0.1.0", "torch": "2.13.0", "cuda_version": "12.4"}
    h200 = [{"index": 0, "name": "H200"}]
    by_device = {
        "a": {**facts, "gpus": h200},
        "b": {**facts, "gpus": h200, "torch": "2.12.0"},
        "c": {**facts, "gpus": []},
    }

    async def preflight(device: Device) -> PreflightVerdict:
        return PreflightVerdict(ready=True, facts=by_device[device.device_id])

    monkeypatch.setattr(group_preflight, "preflight", preflight)
    devices = [
        Device.from_record({**groups.ssh.device(name), "gpus": 1, "slots": 1, "known_hosts": ""}) for name in "abc"
    ]
    verdict = await preflight_group(devices, "127.0.0.1", free_port())
    assert not verdict.ready
    assert verdict.reasons == [
        "the members run different torch versions (2.13.0 on a, c; 2.12.0 on b); every rank needs the same",
        "a, b have GPUs but c has none; a group trains on GPUs on every member or on none",
    ]
    digests = [m["env_digest"] for m in verdict.facts["members"]]
    assert len(set(digests)) == 3


async def test_a_group_is_refused_with_an_unknown_member_and_its_members_cannot_be_removed_under_it(
    groups: Groups, monkeypatch: pytest.MonkeyPatch
) -> None:
    await groups.add_devices("gpu1", "gpu2")
    unknown = await groups.api.post("/v1/device-groups", json={"group_id": "pair", "members": ["gpu1", "gpu9"]})
    assert unknown.status_code == 422
    assert "'gpu9' is not a registered device" in unknown.json()["error"]["message"]
    assert "bashgym device add gpu9" in unknown.json()["error"]["hint"]

    body = {"group_id": "pair", "members": ["gpu1", "gpu2"]}
    assert (await groups.api.post("/v1/device-groups", json=body)).status_code == 201
    replayed = await groups.api.post("/v1/device-groups", json=body)
    assert (replayed.status_code, replayed.json()["replayed"]) == (200, True)
    reordered = await groups.api.post("/v1/device-groups", json={**body, "members": ["gpu2", "gpu1"]})
    assert reordered.status_code == 409

    refused = await groups.api.delete("/v1/devices/gpu2")
    assert refused.status_code == 409
    assert "bashgym device group remove pair" in refused.json()["error"]["hint"]

    monkeypatch.setattr(TrainingService, "runs_on_group", lambda self, group_id: ["run-7"])
    busy = await groups.api.delete("/v1/device-groups/pair")
    assert busy.status_code == 409 and "run-7" in busy.json()["error"]["message"]
    monkeypatch.undo()
    assert (await groups.api.delete("/v1/device-groups/pair")).is_success
    assert (await groups.api.get("/v1/device-groups")).json() == {"groups": []}
    assert (await groups.api.delete("/v1/devices/gpu2")).is_success


async def test_the_group_cli_creates_lists_shows_preflights_and_removes(tmp_path: Path) -> None:
    async with ssh_server(tmp_path / "ssh") as ssh:
        with running_daemon(tmp_path / "home") as daemon:
            env = daemon.env()
            async with httpx.AsyncClient(
                base_url=daemon.url, headers={"Authorization": f"Bearer {daemon.token}"}
            ) as api:
                for name in ("gpu1", "gpu2"):  # `device add` has its own CLI test in test_ssh_lane.py
                    (await api.post("/v1/devices", json=ssh.device(name))).raise_for_status()
            port = str(free_port())
            group = ["pair", "--device", "gpu1", "--device", "gpu2", "--main-port", port]
            created = await cli_async(env, "device", "group", "create", *group, "--json")
            assert created.code == 0, created.stderr
            assert created.json()["record"]["members"] == ["gpu1", "gpu2"]

            # One preflight (seconds: each member imports torch); the ready one is the API test's.
            with taken(int(port)):
                blocked = await cli_async(env, "device", "group", "preflight", "pair")
            assert blocked.code == 7, blocked.stderr
            assert "Preflight of group pair: not ready" in blocked.stdout
            assert "rank 1  gpu2: ready (python" in blocked.stdout, "each member's own verdict"
            assert f"Rendezvous 127.0.0.1:{port} on gpu1: the port is in use" in blocked.stdout
            assert f"not ready: port {port} is in use on gpu1" in blocked.stdout

            listed = (await cli_async(env, "device", "group", "list", "--json")).json()
            assert [(g["group_id"], g["members"], g["ready"]) for g in listed["groups"]] == [
                ("pair", ["gpu1", "gpu2"], False)
            ]
            shown = (await cli_async(env, "device", "group", "show", "pair", "--json")).json()
            assert shown["main_process_port"] == int(port)

            member = await cli_async(env, "device", "remove", "gpu1", "--yes")
            assert member.code == 6 and "bashgym device group remove pair" in member.stderr
            removed = await cli_async(env, "device", "group", "remove", "pair", "--yes", "--json")
            assert removed.code == 0, removed.stderr
            assert removed.json()["record"]["group_id"] == "pair"
