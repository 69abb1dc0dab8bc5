"""The layout is the architecture: each folder may import only the folders below it, with no circle.

The rules read on tests/support/import_map.py's map of every `bashgym.*` import, function-level ones included
(`python -m tests.support.import_map` prints its figures):

    bot, cli ──▶ client (the HTTP clients and the contract); cli ──▶ agents (the MCP server) ──▶ client
    daemon ──▶ ledger, the client's contract (never its HTTP clients), trainers.contracts, trainers.environments
    ledger ──▶ the client's vocabulary: errors, specs, validation, states, redaction (the bottom floor)
    trainers' runtime ──▶ trainers.contracts, trainers.environments (never daemon, ledger or client)
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.import_map import ROOT, Arrow, ImportMap, build

FOLDERS = ("ledger", "daemon", "bot", "trainers", "client", "cli", "agents", "track")
PACKAGED = (*FOLDERS, "skills")  # skills/ is a data package: the bundle ships inside the wheel
TORCH_FREE = ("bashgym.trainers.contracts", "bashgym.trainers.environments")  # the daemon's window on trainers
# The bottom floor: the product's errors and the vocabulary of the wire and the ledger (pydantic specs, pure checks,
# the run state machine, redaction). It imports nothing else of the product.
VOCABULARY = (
    "bashgym.client.errors",
    "bashgym.client.specs",
    "bashgym.client.validation",
    "bashgym.client.states",
    "bashgym.client.redaction",
    "bashgym.client.external",  # the specs of external jobs and plans
    "bashgym.client.likeness",  # what makes two evaluation results comparable
    "bashgym.client.environment",  # a run's measured environment: its shape, its digest, how two differ
    "bashgym.client.tags",  # tag keys and values, notes: what the ledger stores and every adapter checks
)
# The API's request and response models, and notices as text: what the daemon serves and adapters read.
CONTRACT = (
    *VOCABULARY,
    "bashgym.client.models",
    "bashgym.client.render",
    "bashgym.client.tracking",
    "bashgym.client.imports",
)
# What the CLI needs of the daemon besides its API: to start one in this process (`bashgym daemon|up`), its
# settings (where the home is) and version, and its test-only crash points; and the ledger's offline restore.
CLI_PROCESS = (
    "bashgym.daemon.server",
    "bashgym.daemon.settings",
    "bashgym.daemon.version",
    "bashgym.daemon.lockfile",
    "bashgym.daemon.failpoints",
    "bashgym.ledger.restore",
)
ALLOWED: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(VOCABULARY, VOCABULARY),
    "bashgym.client": ("bashgym.client",),
    "bashgym.ledger": ("bashgym.ledger", *VOCABULARY),
    "bashgym.bot": ("bashgym.bot", "bashgym.client"),
    "bashgym.cli": ("bashgym.cli", "bashgym.client", "bashgym.agents", *TORCH_FREE, *CLI_PROCESS),
    # The MCP server is an adapter like the bot: the daemon's client, and the torch-free data contracts for
    # checking a local file before anything is sent.
    "bashgym.agents": ("bashgym.agents", "bashgym.client", *TORCH_FREE),
    # The tracking client is an adapter like the CLI: the daemon's client, and where the CLI finds the daemon.
    # And two torch-free modules of the trainers, so a launched trainer and a user's script measure alike with the
    # same code (a trainer may import nothing outside trainers/, and track/ reaches the client and the daemon's
    # settings): the capture of a run's environment and the system sampler (psutil, NVML).
    "bashgym.track": (
        "bashgym.track",
        "bashgym.client",
        "bashgym.daemon.settings",
        "bashgym.trainers.contracts.runtime",
        "bashgym.trainers.system",
    ),
    "bashgym.trainers.system": ("bashgym.trainers.system",),
    "bashgym.daemon": ("bashgym.daemon", "bashgym.ledger", *CONTRACT, *TORCH_FREE),
    "bashgym.trainers.contracts": TORCH_FREE,
    "bashgym.trainers.environments": TORCH_FREE,
    "bashgym.trainers": ("bashgym.trainers",),
}


@pytest.fixture(scope="module")
def imports() -> ImportMap:
    return build()


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _rule_of(module: str) -> tuple[str, ...]:
    folder = max((f for f in ALLOWED if _within(module, (f,))), key=len)
    return ALLOWED[folder]


def test_every_import_points_down_a_layer(imports: ImportMap) -> None:
    bad = [
        f"{a.source}:{a.line} imports {a.target}{' (inside a function)' if a.lazy else ''}"
        for a in imports.arrows
        if a.source.split(".")[1] in FOLDERS and not _within(a.target, _rule_of(a.source))
    ]
    assert not bad, "\n".join(bad)


def test_no_import_circle_not_even_through_a_function_level_import(imports: ImportMap) -> None:
    assert imports.circles() == []


def test_the_daemon_root_holds_the_wiring_and_subjects_are_folders(imports: ImportMap) -> None:
    root = sorted(name for name, path in imports.modules.items() if path.parent == ROOT / "daemon")
    assert len(root) <= 15, root
    subjects = sorted(p.name for p in (ROOT / "daemon").iterdir() if (p / "__init__.py").is_file())
    assert subjects == ["api", "authority", "campaigns", "evidence", "external", "lanes", "launch", "notices", "ui"]
    # Within the daemon, a subject never reaches into the HTTP surface: api/ sits on top of the others.
    up = [
        a
        for a in imports.arrows
        if _within(a.target, ("bashgym.daemon.api",)) and not _within(a.source, ("bashgym.daemon.api",))
    ]
    assert not [a for a in up if a.source.startswith("bashgym.daemon.") and a.source != "bashgym.daemon.server"], up


def test_the_map_sees_function_level_imports() -> None:
    """The map would hide a circle closed inside a function if it missed those imports."""
    found = build()
    lazy = [a for a in found.arrows if a.lazy]
    assert lazy and all(isinstance(a, Arrow) for a in lazy)
    assert any(a.source == "bashgym.cli.processes" and a.target == "bashgym.daemon.server" for a in lazy)


def _loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "; print('\\n'.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return out.split()


@pytest.mark.parametrize("entry", ["bashgym.bot.app", "bashgym.cli.main", "bashgym.client.http"])
def test_adapters_load_no_ledger_store_and_no_sqlite(entry: str) -> None:
    loaded = _loaded(f"import sys, {entry}")
    assert "sqlite3" not in loaded and "_sqlite3" not in loaded
    assert not [m for m in loaded if m.startswith("bashgym.ledger")], entry
    assert not [m for m in loaded if m.startswith("bashgym.daemon.") and m not in CLI_PROCESS], entry


def test_the_trainer_modules_the_daemon_uses_do_not_import_torch() -> None:
    names = [m for m in build().modules if _within(m, TORCH_FREE)]
    loaded = _loaded(f"import sys, {', '.join(names)}")
    assert "torch" not in loaded and "transformers" not in loaded


def test_the_tracking_client_imports_no_torch_and_only_its_trainer_callback_does() -> None:
    """A script that logs by hand pays for no torch; bashgym.track.transformers is the one module that needs it."""
    loaded = _loaded("import sys, bashgym.track")
    assert "torch" not in loaded and "transformers" not in loaded
    assert "transformers" in _loaded("import sys, bashgym.track.transformers")


def test_daemon_start_up_imports_no_ssh_no_http_client_and_no_torch() -> None:
    """asyncssh (~0.35 s) loads when a run or a check first reaches an SSH device; httpx (~0.15 s, with rich)
    when the first NeMo job or sink post goes out."""
    loaded = _loaded("import sys, bashgym.daemon.server, bashgym.daemon.api.app")
    assert not [m for m in loaded if m.startswith("asyncssh.")], "asyncssh's body ran at start-up"
    assert not [m for m in loaded if m.startswith("httpx.") or m.startswith("rich.")], "httpx loaded at start-up"
    assert "torch" not in loaded and "transformers" not in loaded


def test_no_module_but_an_entry_point_reads_the_environment() -> None:
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
    # threads there before torch loads. A job on rented compute reads its request and Hub token there too. The
    # console script (cli/entry.py) answers help and TAB from the command index before cli/main.py is imported.
    assert sorted(readers) == [
        "bot/__main__.py",
        "cli/entry.py",
        "cli/main.py",
        "track/run.py",  # bashgym.track enters BashGym from a user's own training script
        "trainers/__main__.py",
        "trainers/evaluate.py",
        "trainers/external_job.py",
        "trainers/launch.py",
    ]


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
