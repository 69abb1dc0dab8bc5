"""`bashgym run ...`: the one noun for runs. Each verb is the command it names elsewhere, which stays as an alias
(`training list` and `training status` are `ledger runs` and `ledger run`): one handler, one set of columns."""

from __future__ import annotations

from bashgym.cli import ledger, training  # noqa: F401  (they register the commands named here)
from bashgym.cli.registry import COMMANDS, alias, command_group

# bashgym run VERB -> the command that does it.
RUN_VERBS = {
    "list": ("ledger", "runs"),
    "show": ("ledger", "run"),
    "log": ("training", "log"),
    "metrics": ("training", "metrics"),
    "pause": ("training", "pause"),
    "resume": ("training", "resume"),
    "stop": ("training", "stop"),
    "start": ("training", "start"),
    "plan": ("training", "plan"),
}
# Older spellings that had handlers of their own, with other columns -> the run verb they now are.
OLD_SPELLINGS = {("training", "list"): "list", ("training", "status"): "show"}

command_group("run", help="runs: list, show, log, metrics, download, pause, resume, stop, start, plan")
for verb, source in RUN_VERBS.items():
    alias(("run", verb), source, module=__name__)
for old, verb in OLD_SPELLINGS.items():
    help_text = COMMANDS[RUN_VERBS[verb]][2]
    alias(old, RUN_VERBS[verb], module=__name__, help=f"{help_text} (the same as bashgym run {verb})")
