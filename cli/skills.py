"""`bashgym skills`: install the operator skill bundle, check a copy against its lock, relock after an edit.

None of these needs the daemon: the bundle ships with the package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bashgym.cli import skill_bundle as skills
from bashgym.cli.registry import Ctx, command, command_group, done
from bashgym.client.errors import EXIT_OK, EXIT_RULE, Conflict, InvalidInput, RuleRejected

command_group("skills", help="the skill bundle for coding agents: install, check, lock")


def _install_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, type=Path, help="directory that receives the bundle and its lock")
    parser.add_argument("--force", action="store_true", help="replace a modified bundle already there")


@command("skills", "install", help="copy the skill bundle and its lock into a directory; refuses to overwrite edits")(
    _install_args
)
async def skills_install(ctx: Ctx) -> int:
    target = Path(ctx.args.target).expanduser()
    try:
        installed = skills.install(target, force=ctx.args.force)
    except skills.TargetModified as exc:
        raise Conflict(
            str(exc), hint="Keep the edits elsewhere, or pass --force to replace them with the shipped bundle."
        ) from exc
    except skills.SkillsError as exc:
        raise RuleRejected(
            str(exc), hint="Reinstall bashgym, or run `bashgym skills lock` after an intended edit."
        ) from exc
    except OSError as exc:
        raise InvalidInput(f"Cannot install the skill bundle into {target}: {exc}.") from exc
    result = {
        "target": str(installed.target),
        "written": list(installed.written),
        "removed": list(installed.removed),
        **{k: v for k, v in installed.check.to_dict().items() if k != "root"},
    }
    code = EXIT_OK if installed.check.verified else EXIT_RULE
    if ctx.as_json:
        done(ctx, result)
        return code
    print(f"Installed {len(installed.written)} skill files and {skills.LOCK_NAME} into {target}.")
    for name in installed.removed:
        print(f"  removed stale {name}")
    for line in installed.check.describe():
        sys.stderr.write(f"  {line}\n")
    return code


def _check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, help="bundle directory to check (default: the one shipped with bashgym)")


@command("skills", "check", help="verify a skill bundle against its lock; exit 7 naming each differing file")(
    _check_args
)
async def skills_check(ctx: Ctx) -> int:
    root = Path(ctx.args.dir).expanduser() if ctx.args.dir else None
    check = skills.verify(root)
    if ctx.as_json:
        done(ctx, check.to_dict())
    elif check.verified:
        print(f"Skill bundle at {check.root} matches its lock.")
    else:
        sys.stderr.write(f"Skill bundle at {check.root} does not match its lock:\n")
        for line in check.describe():
            sys.stderr.write(f"  {line}\n")
        sys.stderr.write("If the edit was intended, run `bashgym skills lock`; otherwise reinstall the bundle.\n")
    return EXIT_OK if check.verified else EXIT_RULE


def _lock_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, help="bundle directory to relock (default: the one shipped with bashgym)")


@command("skills", "lock", help="rewrite the bundle's lock from its files, after an intended edit (maintainers)")(
    _lock_args
)
async def skills_lock(ctx: Ctx) -> int:
    root = Path(ctx.args.dir).expanduser() if ctx.args.dir else skills.bundle_root()
    try:
        lock = skills.write_lock(root)
    except skills.SkillsError as exc:
        raise InvalidInput(str(exc), hint="Name the bundle directory with --dir.") from exc
    if ctx.as_json:
        return done(ctx, {"root": str(root), **lock})
    print(f"Locked {len(lock['files'])} files in {root / skills.LOCK_NAME}.")
    return EXIT_OK
