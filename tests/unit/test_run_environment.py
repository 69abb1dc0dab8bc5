"""The environment of a run (issue 53, item 6): measured in its own process without importing torch, the git state
of the user's code clean or dirty, a strict shape for what a caller sends, and the facts in which two differ."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bashgym.client.environment import RunEnvironment, environment_differences, environment_digest
from bashgym.trainers.contracts.runtime import capture_environment, git_state
from pydantic import ValidationError

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *identity, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "code"
    root.mkdir()
    git(root, "init", "-q")
    (root / "train.py").write_text("print('train')\n")
    git(root, "add", "train.py")
    git(root, "commit", "-q", "-m", "first")
    return root


@needs_git
def test_a_clean_checkout_records_its_commit_and_not_dirty(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    assert git_state(repo) == {"commit": head, "dirty": False}
    assert capture_environment(code_dir=repo)["git"] == {"commit": head, "dirty": False}


@needs_git
def test_an_edited_or_untracked_file_makes_the_checkout_dirty(repo: Path) -> None:
    (repo / "train.py").write_text("print('changed')\n")
    assert git_state(repo) == {"commit": git(repo, "rev-parse", "HEAD").strip(), "dirty": True}
    git(repo, "checkout", "--", "train.py")
    (repo / "notes.txt").write_text("new")
    assert git_state(repo)["dirty"] is True  # type: ignore[index]


def test_outside_a_repository_there_is_no_git_state_and_no_failure(tmp_path: Path) -> None:
    assert git_state(tmp_path) is None
    assert capture_environment(code_dir=tmp_path)["git"] is None


def test_the_capture_imports_no_torch_and_names_the_installed_versions() -> None:
    code = (
        "import json, sys; from bashgym.trainers.contracts.runtime import capture_environment; "
        "facts = capture_environment(); print(json.dumps({'facts': facts, 'torch': 'torch' in sys.modules}))"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    assert out["torch"] is False
    facts = out["facts"]
    from importlib import metadata

    assert facts["packages"]["torch"] == metadata.version("torch")
    assert facts["packages"]["transformers"] == metadata.version("transformers")
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    RunEnvironment.model_validate(facts)  # the daemon accepts what the capture makes


def facts(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "python": "3.11.7",
        "implementation": "CPython",
        "os": "Linux 6.8.0",
        "machine": "x86_64",
        "packages": {"torch": "2.13.0", "transformers": "5.24.0"},
        "cuda": "12.4",
        "driver": "550.54",
        "accelerators": ["NVIDIA H100 80GB HBM3"],
        "git": {"commit": "a" * 40, "dirty": False},
        "hostname": "node-1",
    }
    return {**base, **changes}


def test_the_digest_is_every_fact_but_the_host_name_in_canonical_json() -> None:
    expected = {k: v for k, v in facts().items() if k != "hostname"}
    canonical = json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert environment_digest(RunEnvironment.model_validate(facts())) == hashlib.sha256(canonical.encode()).hexdigest()
    moved = RunEnvironment.model_validate(facts(hostname="node-2"))
    assert environment_digest(moved) == environment_digest(RunEnvironment.model_validate(facts()))
    dirty = RunEnvironment.model_validate(facts(git={"commit": "a" * 40, "dirty": True}))
    assert environment_digest(dirty) != environment_digest(RunEnvironment.model_validate(facts()))


def test_differences_name_each_fact_with_both_values() -> None:
    older = facts(packages={"torch": "2.12.1", "transformers": "5.24.0", "trl": "1.16.0"}, cuda="12.1")
    assert environment_differences(facts(), older) == [
        "torch 2.13.0 vs 2.12.1",
        "CUDA 12.4 vs 12.1",
        "trl absent vs 1.16.0",
    ]
    assert environment_differences(facts(), facts(hostname="elsewhere")) == []
    assert environment_differences(None, facts()) == ["environment not recorded for the first"]


@pytest.mark.parametrize(
    "hostile",
    [
        facts(digest="0" * 64),  # a caller's digest is never taken
        facts(packages={"torch": {"nested": ["junk"]}}),
        facts(packages={f"p{i}": "1" for i in range(65)}),
        facts(accelerators=["GPU"] * 65),
        facts(python="3" * 201),
        facts(os="Linux\n[bold]forged line"),
        facts(packages={"../../etc": "1"}),
        facts(git={"commit": "HEAD; rm -rf /", "dirty": False}),
        facts(git={"commit": "a" * 40, "dirty": False, "remote": "https://token@host/repo"}),
    ],
)
def test_a_hostile_environment_is_refused_whole(hostile: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RunEnvironment.model_validate(hostile)
