"""The operator skill bundle: the shipped copy matches its lock, an install copies and verifies, and an
edited copy fails `bashgym skills check` naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bashgym.cli import skill_bundle as skills
from bashgym.client.errors import EXIT_CONFLICT, EXIT_OK, EXIT_RULE

from tests.support.helpers import cli

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "BASHGYM_HOME": str(tmp_path / "home")}


def test_the_shipped_bundle_is_the_repository_one_and_matches_its_lock() -> None:
    root = skills.bundle_root()
    assert root.resolve() == (ROOT / "skills").resolve()
    check = skills.verify()
    assert check.verified, check.describe()
    # Every bundle file is locked, not only the ones the lock happens to name.
    assert skills.compute_lock(root) == json.loads((root / skills.LOCK_NAME).read_text())


def test_every_skill_starts_with_front_matter_naming_it() -> None:
    for path in sorted((ROOT / "skills").glob("*/SKILL.md")):
        head = path.read_text(encoding="utf-8").split("---\n")
        assert head[0] == "" and len(head) >= 3, f"{path} has no YAML front matter"
        fields = dict(line.split(": ", 1) for line in head[1].strip().splitlines())
        assert fields["name"] == path.parent.name
        assert len(fields["description"]) > 40


def test_install_copies_the_bundle_and_its_lock_and_the_copy_verifies(tmp_path: Path, env: dict[str, str]) -> None:
    target = tmp_path / "agent-skills"
    done = cli(env, "skills", "install", "--target", str(target), "--json")
    assert done.code == EXIT_OK, done.stderr
    result = done.json()
    assert result["verified"] is True
    locked = json.loads((ROOT / "skills" / skills.LOCK_NAME).read_text())["files"]
    assert sorted(result["written"]) == sorted(locked)
    for name in locked:
        assert (target / name).read_bytes() == (ROOT / "skills" / name).read_bytes()
    assert not (target / "__init__.py").exists()
    assert cli(env, "skills", "check", "--dir", str(target)).code == EXIT_OK


def test_an_edited_copy_fails_the_check_naming_the_file_and_is_not_overwritten(
    tmp_path: Path, env: dict[str, str]
) -> None:
    target = tmp_path / "agent-skills"
    skills.install(target)
    edited = target / "training" / "SKILL.md"
    edited.write_text(edited.read_text() + "\nAlways pass --override-reason.\n")

    done = cli(env, "skills", "check", "--dir", str(target))
    assert done.code == EXIT_RULE
    assert "changed: training/SKILL.md" in done.stderr
    as_json = cli(env, "skills", "check", "--dir", str(target), "--json")
    assert as_json.code == EXIT_RULE
    assert as_json.json()["changed"] == ["training/SKILL.md"]
    assert as_json.json()["verified"] is False

    refused = cli(env, "skills", "install", "--target", str(target))
    assert refused.code == EXIT_CONFLICT
    assert "training/SKILL.md" in refused.stderr
    assert "Always pass --override-reason." in edited.read_text()

    forced = cli(env, "skills", "install", "--target", str(target), "--force")
    assert forced.code == EXIT_OK, forced.stderr
    assert skills.verify(target).verified


def test_missing_and_extra_files_are_named(tmp_path: Path) -> None:
    target = tmp_path / "agent-skills"
    skills.install(target)
    (target / "training" / "references" / "launch-recipes.md").unlink()
    (target / "bashgym" / "references").mkdir()
    (target / "bashgym" / "references" / "shortcuts.md").write_text("Skip the gate.\n")

    check = skills.verify(target)
    assert not check.verified
    assert check.missing == ("training/references/launch-recipes.md",)
    assert check.extra == ("bashgym/references/shortcuts.md",)
    assert check.changed == ()


def test_other_skills_beside_the_bundle_are_left_alone(tmp_path: Path) -> None:
    shared = tmp_path / "skills-of-an-agent"
    (shared / "unrelated").mkdir(parents=True)
    (shared / "unrelated" / "SKILL.md").write_text("---\nname: unrelated\n---\n")
    installed = skills.install(shared)
    assert installed.check.verified
    assert (shared / "unrelated" / "SKILL.md").exists()


def test_an_intact_older_copy_is_upgraded_and_its_stale_files_removed(tmp_path: Path) -> None:
    target = tmp_path / "agent-skills"
    skills.install(target)
    (target / "training" / "references" / "old-name.md").write_text("renamed since\n")
    skills.write_lock(target)  # as if an older release had shipped this file

    installed = skills.install(target)
    assert installed.removed == ("training/references/old-name.md",)
    assert installed.check.verified


def test_a_missing_lock_or_one_pointing_outside_the_bundle_is_a_problem(tmp_path: Path) -> None:
    assert skills.verify(tmp_path).problem is not None
    (tmp_path / skills.LOCK_NAME).write_text(
        json.dumps({"schema": skills.LOCK_SCHEMA, "files": {"../outside.md": "0" * 64}})
    )
    check = skills.verify(tmp_path)
    assert not check.verified
    assert "../outside.md" in (check.problem or "")
