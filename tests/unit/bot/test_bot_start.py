"""`bashgym bot` says exactly what is missing or wrong before it touches Discord or the daemon."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bashgym.bot.app import main
from bashgym.bot.settings import BotConfigError, load_bot_settings

from tests.support.discord_standin import APPLICATION_ID, GUILD_ID, discord_standin

COMPLETE = {
    "BASHGYM_DISCORD_TOKEN": "a-token",
    "BASHGYM_DISCORD_APPLICATION_ID": str(APPLICATION_ID),
    "BASHGYM_DISCORD_GUILD_IDS": str(GUILD_ID),
    "BASHGYM_BOT_API_TOKEN": "bgy_bot",
    "BASHGYM_API": "http://127.0.0.1:9",
}


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ("BASHGYM_DISCORD_TOKEN", "The Discord bot token is missing: set BASHGYM_DISCORD_TOKEN"),
        ("BASHGYM_DISCORD_APPLICATION_ID", "BASHGYM_DISCORD_APPLICATION_ID must be your Discord application's id"),
        ("BASHGYM_DISCORD_GUILD_IDS", "BASHGYM_DISCORD_GUILD_IDS must list the guild"),
        ("BASHGYM_BOT_API_TOKEN", "The bot has no daemon token: set BASHGYM_BOT_API_TOKEN"),
    ],
)
def test_each_missing_setting_is_named_with_what_to_set(tmp_path: Path, missing: str, says: str) -> None:
    environ = {k: v for k, v in COMPLETE.items() if k != missing} | {"BASHGYM_HOME": str(tmp_path)}
    with pytest.raises(BotConfigError, match=says):
        load_bot_settings(environ)


def test_the_token_variable_can_be_renamed_and_settings_never_print_tokens(tmp_path: Path) -> None:
    environ = {**COMPLETE, "BASHGYM_DISCORD_TOKEN_ENV": "MY_BOT_TOKEN", "BASHGYM_HOME": str(tmp_path)}
    with pytest.raises(BotConfigError, match="set MY_BOT_TOKEN"):
        load_bot_settings(environ)
    settings = load_bot_settings({**environ, "MY_BOT_TOKEN": "s3cret-token"})
    assert (
        settings.discord_token == "s3cret-token" and "s3cret" not in repr(settings) and "bgy_bot" not in repr(settings)
    )


def test_main_exits_2_with_the_reason_when_unconfigured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main({"BASHGYM_HOME": str(tmp_path)}) == 2
    assert "bashgym bot: The Discord bot token is missing" in capsys.readouterr().err


@pytest.mark.anyio
async def test_a_token_discord_refuses_exits_3_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with discord_standin(token="the-real-token"):
        code = await asyncio.to_thread(main, {**COMPLETE, "BASHGYM_HOME": str(tmp_path)})
    assert code == 3
    assert "Discord refused the bot token (401)" in capsys.readouterr().err
