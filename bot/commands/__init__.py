"""The slash commands, one module per group. Each maps to one daemon call made for the person who typed it; the
daemon checks their authority and the bot shows its answer. Consequential ones ask for confirmation first."""

from __future__ import annotations

from collections.abc import Callable

from bashgym.bot.commands.auth import AuthGroup
from bashgym.bot.commands.campaign import CampaignGroup, ResearchGroup
from bashgym.bot.commands.devices import DeviceGroup
from bashgym.bot.commands.evidence import EvalGroup, PromoteGroup, RunCardGroup
from bashgym.bot.commands.ledger import BudgetGroup, LedgerGroup
from bashgym.bot.commands.project import ProjectGroup
from bashgym.bot.commands.run import RunGroup
from discord import app_commands

GROUPS: tuple[Callable[[], app_commands.Group], ...] = (
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
    AuthGroup,
)
