"""Guard tests: imports point one way, and the daemon and bot never load torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("ledger", "daemon", "bot", "trainers")
PACKAGED = (*FOLDERS, "skills")  # skills/ is a data package: the bundle ships inside the wheel


def _imports(folder: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def _bashgym_edges(folder: str) -> set[tuple[str, str]]:
    return {(path, name) for path, names in _imports(folder).items() for name in names if name.startswith("bashgym.")}


def test_ledger_imports_nothing_from_daemon_bot_or_trainers() -> None:
    bad = {(p, n) for p, n in _bashgym_edges("ledger") if not n.startswith("bashgym.ledger")}
    assert not bad


def test_trainers_import_nothing_from_daemon_or_ledger() -> None:
    bad = {(p, n) for p, n in _bashgym_edges("trainers") if not n.startswith("bashgym.trainers")}
    assert not bad


def test_bot_imports_only_the_daemon_client_and_api_models() -> None:
    allowed = (
        "bashgym.bot",
        "bashgym.daemon.client",
        "bashgym.daemon.client_aiohttp",
        "bashgym.daemon.api_models",
        "bashgym.daemon.wire_errors",
    )
    bad = {(p, n) for p, n in _bashgym_edges("bot") if not n.startswith(allowed)}
    assert not bad


# The trainer modules the daemon may use: request models and pure evidence code, none of which imports torch.
TORCH_FREE = (
    "bashgym.trainers.specs",
    "bashgym.trainers.contracts",
    "bashgym.trainers.evidence_math",
    "bashgym.trainers.terminal_tasks",
    "bashgym.trainers.sandbox",
    "bashgym.trainers.evaluate",
    "bashgym.trainers.placement",  # an evaluation's device choice (auto, cpu, cuda); torch loads only to place a model
    "bashgym.trainers.canaries",
    "bashgym.trainers.distributed",
    "bashgym.trainers.rundir",  # the run directory's layout: the checkpoint completion marker's name
    "bashgym.trainers.settings",  # what each field does: plan's checks and effective configuration
    "bashgym.trainers.artifacts",  # the effective configuration's file name
)


def test_daemon_imports_only_ledger_and_torch_free_trainer_modules() -> None:
    allowed = ("bashgym.daemon", "bashgym.ledger", *TORCH_FREE)
    bad = {(p, n) for p, n in _bashgym_edges("daemon") if not n.startswith(allowed)}
    assert not bad


def test_the_trainer_modules_the_daemon_uses_do_not_import_torch() -> None:
    code = f"import sys; import {', '.join(TORCH_FREE)}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_no_module_but_settings_reads_the_environment() -> None:
    readers = []
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if "os.environ" in text or "os.getenv" in text:
                readers.append(str(path.relative_to(ROOT)))
    # Each process reads its environment once, at its entry point, and passes what it needs down: the
    # CLI (and so the daemon) through load_settings, a trainer through run_training, the bot through
    # load_bot_settings. A scaled-out run's launcher is a trainer's entry point too: it hands its pid to the
    # ranks accelerate starts, through the environment they inherit. The evaluator's entry point sets its torch
    # threads there before torch loads.
    assert sorted(readers) == [
        "bot/__main__.py",
        "daemon/cli.py",
        "trainers/__main__.py",
        "trainers/evaluate.py",
        "trainers/launch.py",
    ]


def test_importing_daemon_and_bot_does_not_load_torch() -> None:
    code = (
        "import sys, bashgym.daemon.server, bashgym.daemon.cli, bashgym.daemon.api, bashgym.bot.app; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_every_python_package_folder_is_listed_for_installation() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        "bashgym." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in PACKAGED
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert found <= listed, found - listed
    # The rest are folders of package data whose names could be imported (setuptools warns unless they are listed).
    for name in listed - found:
        folder = ROOT.joinpath(*name.split(".")[1:])
        assert folder.is_dir() and not list(folder.glob("*.py")), name
