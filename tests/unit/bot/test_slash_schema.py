"""The slash schema reads as finished: every option described within Discord's limits, ids autocomplete,
numbers bounded, enumerations offered as choices, and the bot's own lists agree with the daemon's."""

from __future__ import annotations

import typing

import pytest
from bashgym.bot.commands import GROUPS
from bashgym.bot.commands.shared import METHODS, RUN_STATUSES
from bashgym.client.models import TrainingMethod
from bashgym.client.specs import RunStatus
from bashgym.trainers.contracts.request import METHODS as TRAINER_METHODS
from bashgym.trainers.contracts.request import TrainingRequest
from discord import AppCommandOptionType, app_commands

ID_OPTIONS = {"project", "run", "campaign", "suite", "model_version", "dataset", "baseline", "candidate", "device"}


def options() -> list[tuple[str, app_commands.Parameter]]:
    found = []
    for group in GROUPS:
        made = group()
        for command in made.walk_commands():
            if isinstance(command, app_commands.Command):
                found += [(f"/{made.name} {command.name} {p.name}", p) for p in command.parameters]
    return found


def test_every_option_has_a_real_one_line_description() -> None:
    described = {where: str(p.description) for where, p in options()}
    assert len(described) > 90
    assert [w for w, text in described.items() if text in ("…", "...", "")] == []
    assert [w for w, text in described.items() if len(text) > 100 or "\n" in text] == []  # Discord's limit


@pytest.mark.parametrize("where", sorted(w for w, p in options() if p.name in ID_OPTIONS))
def test_every_id_option_autocompletes_from_the_daemon(where: str) -> None:
    parameter = dict(options())[where]
    assert parameter.autocomplete or parameter.choices, where


def test_every_number_is_bounded_and_enumerations_are_choices() -> None:
    numeric = (AppCommandOptionType.integer, AppCommandOptionType.number)
    numbers = [(w, p) for w, p in options() if p.type in numeric]
    assert numbers and [w for w, p in numbers if p.min_value is None or p.max_value is None] == []
    statuses = dict(options())["/run list status"]
    assert [c.value for c in statuses.choices] == list(typing.get_args(RunStatus))


def test_the_bots_lists_are_the_wire_contracts_and_the_contract_is_the_trainers() -> None:
    assert RUN_STATUSES is RunStatus and METHODS is TrainingMethod  # derived, not copied
    method = TrainingRequest.model_fields["method"].annotation
    assert typing.get_args(TrainingMethod) == typing.get_args(method) == TRAINER_METHODS
