"""/device: SSH compute devices."""

from __future__ import annotations

from bashgym.bot.commands.shared import Interaction, call, devices_ac, rows_of
from bashgym.bot.core import (
    Reply,
    answer,
    embed,
    table,
)
from discord import app_commands


class DeviceGroup(app_commands.Group, name="device", description="SSH compute devices"):
    @app_commands.command(name="list", description="Registered devices and their last preflight")
    async def list_(self, interaction: Interaction) -> None:
        async def work() -> Reply:
            data = await call(interaction, "GET", "/v1/devices")
            rows = [{**d, "ready": (d.get("preflight") or {}).get("ready")} for d in rows_of(data, "devices")]
            return Reply(embed=embed("Devices", description=table(rows, ["device_id", "host", "ready"])))

        await answer(interaction, work())

    @app_commands.command(name="preflight", description="Check a device can train now (device.manage)")
    @app_commands.autocomplete(device=devices_ac)
    async def preflight(self, interaction: Interaction, device: str) -> None:
        async def work() -> Reply:
            data = await call(interaction, "POST", f"/v1/devices/{device}/preflight")
            verdict = data.get("verdict", data)
            outcome = "success" if verdict.get("ok") else "failure"
            checks = verdict.get("checks", [])
            return Reply(
                embed=embed(
                    f"Preflight of {device}", outcome=outcome, description=table(checks, ["name", "ok", "detail"])
                )
            )

        await answer(interaction, work())
