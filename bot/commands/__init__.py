"""The slash commands, one module per group. Each maps to one daemon call made for the person who typed it; the
daemon checks their authority and the bot shows its answer. Consequential ones ask for confirmation first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bashgym.bot.commands.auth import AuthGroup
from bashgym.bot.commands.budget import BudgetGroup
from bashgym.bot.commands.campaign import CampaignGroup
from bashgym.bot.commands.device import DeviceGroup
from bashgym.bot.commands.eval import EvalGroup
from bashgym.bot.commands.jobs import JobsGroup
from bashgym.bot.commands.ledger import LedgerGroup
from bashgym.bot.commands.project import ProjectGroup
from bashgym.bot.commands.promote import PromoteGroup
from bashgym.bot.commands.research import ResearchGroup
from bashgym.bot.commands.run import RunGroup
from bashgym.bot.commands.runcard import RunCardGroup
from bashgym.bot.commands.shared import describe_options
from bashgym.bot.commands.tags import TagsGroup
from bashgym.bot.commands.ui import ui
from discord import app_commands


def _described(group: type[app_commands.Group]) -> Callable[[], app_commands.Group]:
    return lambda: describe_options(group())


GROUPS: tuple[Callable[[], app_commands.Group], ...] = tuple(
    _described(group)
    for group in (
        ProjectGroup,
        RunGroup,
        EvalGroup,
        RunCardGroup,
        PromoteGroup,
        CampaignGroup,
        ResearchGroup,
        LedgerGroup,
        BudgetGroup,
        DeviceGroup,
        JobsGroup,
        TagsGroup,
        AuthGroup,
    )
)

# Commands of their own, not in a group.
COMMANDS: tuple[app_commands.Command[Any, Any, Any], ...] = (ui,)
