"""The Discord stand-in behaves like Discord to the real discord.py client: login, gateway, commands, replies."""

from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator

import aiohttp
import discord
import pytest
from discord import app_commands

from tests.support.discord_standin import (
    ALICE_ID,
    BOB_ID,
    CHANNEL_ID,
    EPHEMERAL,
    LOADING,
    DiscordStandIn,
    discord_standin,
    running_client,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15)]

MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.2-1b")


class Confirm(discord.ui.View):
    """One button that only the user who ran the command may press."""

    def __init__(self, owner_id: int) -> None:
        super().__init__(timeout=30)
        self.owner_id = owner_id

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        if interaction.user.id == self.owner_id:
            return True
        await interaction.response.send_message("Only the user who asked can confirm.", ephemeral=True)
        return False

    @discord.ui.button(label="Yes", custom_id="confirm:yes", style=discord.ButtonStyle.success)
    async def yes(self, interaction: discord.Interaction, _: discord.ui.Button[Confirm]) -> None:
        await interaction.response.edit_message(content=f"Confirmed by {interaction.user.name}.", view=None)
        self.stop()


class ProbeClient(discord.Client):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None  # discord.py sleeps 5 s before every IDENTIFY but the first; the stand-in has no identify limit


def make_bot(guild_id: int) -> tuple[discord.Client, app_commands.CommandTree[discord.Client]]:
    client = ProbeClient(intents=discord.Intents.default(), guild_ready_timeout=0.05, chunk_guilds_at_startup=False)
    tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(client)
    guild = discord.Object(guild_id)

    @tree.command(guild=guild, description="Answer pong.")
    async def ping(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("pong")

    probe = app_commands.Group(name="probe", description="Probe the stand-in.")

    @probe.command(description="Echo the text back.")
    async def echo(interaction: discord.Interaction, text: str) -> None:
        await interaction.response.send_message(f"echo: {text}")

    @probe.command(description="Defer, then edit the reply.")
    async def slow(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.edit_original_response(content="done after defer")

    @probe.command(description="Defer, then answer in two followups.")
    async def report(interaction: discord.Interaction) -> None:
        await interaction.response.defer()
        await interaction.followup.send("part 1")
        await interaction.followup.send("part 2", ephemeral=True)

    @probe.command(description="Ask for a confirmation.")
    async def confirm(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("Proceed?", view=Confirm(interaction.user.id))

    @probe.command(description="Send a file back reversed.")
    async def upload(interaction: discord.Interaction, file: discord.Attachment) -> None:
        data = await file.read()
        reply = discord.File(io.BytesIO(data[::-1]), filename="reversed.bin")
        await interaction.response.send_message(f"{file.filename}: {len(data)} bytes", file=reply)

    @probe.command(description="Pick a model.")
    async def pick(interaction: discord.Interaction, model: str) -> None:
        await interaction.response.send_message(model)

    @pick.autocomplete("model")
    async def pick_model(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        return [app_commands.Choice(name=m, value=m) for m in MODELS if m.startswith(current)]

    tree.add_command(probe, guild=guild)
    return client, tree


@pytest.fixture
async def standin() -> AsyncIterator[DiscordStandIn]:
    async with discord_standin() as running:
        yield running
    assert running.errors == []


@pytest.fixture
async def client(standin: DiscordStandIn) -> AsyncIterator[discord.Client]:
    bot, tree = make_bot(standin.guild_id)
    async with running_client(bot):
        await tree.sync(guild=discord.Object(standin.guild_id))
        yield bot


async def test_slash_command_reply_reaches_the_channel(standin: DiscordStandIn, client: discord.Client) -> None:
    sent = await standin.send_slash("ping")

    callback = await standin.wait_for_callback(sent)
    reply = await standin.wait_for_reply(sent)

    assert (callback.type, callback.data["content"]) == (4, "pong")
    assert reply["content"] == "pong"
    assert [m["content"] for m in standin.messages(CHANNEL_ID)] == ["pong"]
    assert sorted(standin.commands[standin.guild_id]) == ["ping", "probe"]
    assert standin.gateway_queries[0]["v"] == "10"


async def test_subcommand_of_a_group_gets_its_option(standin: DiscordStandIn, client: discord.Client) -> None:
    spelled = await standin.send_slash("probe echo", {"text": "hi"})
    by_keyword = await standin.send_slash("probe", {"text": "there"}, subcommand="echo")

    assert (await standin.wait_for_reply(spelled))["content"] == "echo: hi"
    assert (await standin.wait_for_reply(by_keyword))["content"] == "echo: there"


async def test_deferred_reply_is_edited_in_place(standin: DiscordStandIn, client: discord.Client) -> None:
    sent = await standin.send_slash("probe slow")

    callback = await standin.wait_for_callback(sent)
    reply = await standin.wait_for_reply(sent)

    assert callback.type == 5
    assert reply["content"] == "done after defer"
    assert reply["flags"] & LOADING == 0
    assert len(standin.messages(CHANNEL_ID)) == 1


async def test_first_followup_after_a_defer_fills_the_loading_message(
    standin: DiscordStandIn, client: discord.Client
) -> None:
    sent = await standin.send_slash("probe report")

    reply = await standin.wait_for_reply(sent)
    await standin.wait_until(lambda: len(sent.followup_ids) == 2, what="two followups")

    assert reply["content"] == "part 1"
    assert [(m["content"], m["flags"]) for m in standin.messages(CHANNEL_ID)] == [("part 1", 0), ("part 2", EPHEMERAL)]


async def test_button_click_by_the_invoker_reaches_the_callback(
    standin: DiscordStandIn, client: discord.Client
) -> None:
    asked = await standin.wait_for_reply(await standin.send_slash("probe confirm", user_id=ALICE_ID))

    stranger = await standin.wait_for_callback(await standin.click(asked, "confirm:yes", user_id=BOB_ID))
    owner = await standin.wait_for_callback(await standin.click(asked, "confirm:yes", user_id=ALICE_ID))

    assert (stranger.type, stranger.data["flags"] & EPHEMERAL) == (4, EPHEMERAL)
    assert owner.type == 7
    assert standin.message(int(asked["id"]))["content"] == "Confirmed by alice."
    assert standin.message(int(asked["id"]))["components"] == []


async def test_attachment_option_round_trips_through_multipart(standin: DiscordStandIn, client: discord.Client) -> None:
    sent = await standin.send_slash("probe upload", {"file": ("weights.bin", b"abc123")})

    reply = await standin.wait_for_reply(sent)

    assert reply["content"] == "weights.bin: 6 bytes"
    assert [a["filename"] for a in reply["attachments"]] == ["reversed.bin"]
    assert standin.attachment_bytes(reply["attachments"][0]) == b"321cba"
    assert standin.requests_to("GET", r"^/attachments/\d+/weights\.bin$")


async def test_autocomplete_offers_matching_choices(standin: DiscordStandIn, client: discord.Client) -> None:
    sent = await standin.autocomplete("probe pick", focused="model", value="qwen")

    callback = await standin.wait_for_callback(sent)

    assert callback.type == 8
    assert [c["value"] for c in callback.data["choices"]] == ["qwen2.5-0.5b", "qwen2.5-1.5b"]


async def test_channel_post_with_a_repeated_nonce_creates_one_message(
    standin: DiscordStandIn, client: discord.Client
) -> None:
    channel = client.get_channel(CHANNEL_ID)
    assert isinstance(channel, discord.TextChannel)

    first = await channel.send("run 42 finished", nonce="run-42")
    second = await channel.send("run 42 finished", nonce="run-42")

    assert first.id == second.id
    assert [m["content"] for m in standin.messages(CHANNEL_ID)] == ["run 42 finished"]
    posts = standin.requests_to("POST", r"/channels/\d+/messages$")
    assert [(p.json["nonce"], p.json["enforce_nonce"]) for p in posts] == [("run-42", True)] * 2


async def test_rate_limited_post_is_retried_after_retry_after(standin: DiscordStandIn, client: discord.Client) -> None:
    channel = client.get_channel(CHANNEL_ID)
    assert isinstance(channel, discord.TextChannel)
    standin.rate_limit("POST", r"^/channels/\d+/messages$", retry_after_s=0.3)

    started = time.monotonic()
    await channel.send("after the 429")

    assert time.monotonic() - started >= 0.3
    assert [r.status for r in standin.requests_to("POST", r"/channels/\d+/messages$")] == [429, 200]
    assert [m["content"] for m in standin.messages(CHANNEL_ID)] == ["after the 429"]


async def test_unknown_route_answers_a_404_naming_the_path(standin: DiscordStandIn, client: discord.Client) -> None:
    with pytest.raises(discord.NotFound, match="/api/v10/nowhere/7"):
        await client.http.request(discord.http.Route("GET", "/nowhere/{x}", x=7))

    async with aiohttp.ClientSession() as session, session.get(f"{standin.url}/api/v10/users/@me") as response:
        assert response.headers["Content-Type"] == "application/json"


async def test_gateway_resumes_after_a_dropped_socket(standin: DiscordStandIn, client: discord.Client) -> None:
    await standin.disconnect()
    await standin.wait_for_gateway()

    reply = await standin.wait_for_reply(await standin.send_slash("ping"))

    assert [f["op"] for f in standin.gateway_frames if f["op"] in (2, 6)] == [2, 6]
    assert reply["content"] == "pong"


async def test_gateway_reidentifies_when_the_session_is_gone(standin: DiscordStandIn, client: discord.Client) -> None:
    await standin.disconnect(is_resumable=False)
    await standin.wait_for_gateway()

    reply = await standin.wait_for_reply(await standin.send_slash("ping"))

    assert [f["op"] for f in standin.gateway_frames if f["op"] in (2, 6)] == [2, 6, 2]
    assert reply["content"] == "pong"


async def test_answer_after_the_deadline_is_an_unknown_interaction(
    standin: DiscordStandIn, client: discord.Client
) -> None:
    standin.callback_deadline_s = 0.0

    sent = await standin.send_slash("ping")
    await standin.wait_until(lambda: standin.requests_to("POST", r"/interactions/"), what="the late callback")

    assert [r.status for r in standin.requests_to("POST", r"/interactions/")] == [404]
    assert sent.callbacks == []
    assert standin.messages(CHANNEL_ID) == []


async def test_unsynced_command_cannot_be_sent(standin: DiscordStandIn) -> None:
    with pytest.raises(LookupError, match=r"tree\.sync\(\)"):
        await standin.send_slash("ping")
