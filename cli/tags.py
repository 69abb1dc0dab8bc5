"""`bashgym run|model|campaign tag|untag|note`: tags and a note on a run, a model version or a campaign
(ledger.annotate), and `bashgym model list`, searchable by tag like `run list` and `campaign list`."""

from __future__ import annotations

import argparse
from typing import Any

from bashgym.cli.output import pairs
from bashgym.cli.registry import Ctx, command, done
from bashgym.cli.views import labels, tag_summary
from bashgym.client.errors import EXIT_OK
from bashgym.client.tags import NOTE_MAX, EntityKind, entity_path, parse_tags

# The CLI's noun of each kind, and the argument (its dest, which short-id resolution reads) naming the entity.
NOUNS: dict[str, tuple[EntityKind, str, str]] = {
    "run": ("run", "run", "run id (a unique prefix is enough)"),
    "model": ("model_version", "model_version", "model version id"),
    "campaign": ("campaign", "campaign", "campaign id"),
}


def add_tag_filter(parser: argparse.ArgumentParser) -> None:
    """`--tag key=value` (or `--tag key`: carries the tag), repeatable; all must hold."""
    parser.add_argument(
        "--tag", action="append", dest="tag", metavar="KEY[=VALUE]", help="only those carrying this tag (repeatable)"
    )


def _labels_shown(ctx: Ctx, written: dict[str, Any], said: str) -> int:
    if ctx.as_json:
        return done(ctx, written)
    record = written["record"]
    print(said if not written["replayed"] else f"{said} (already so; nothing was changed)")
    pairs([("tags", tag_summary(record["tags"]) or "(none)"), *labels(record)[1 if record["tags"] else 0 :]])
    return EXIT_OK


def _add_commands(noun: str, kind: EntityKind, dest: str, what: str) -> None:
    def entity_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(dest, metavar=noun.upper(), help=what)
        parser.add_argument("--project", required=True, help="project id")

    def tag_args(parser: argparse.ArgumentParser) -> None:
        entity_args(parser)
        parser.add_argument("tags", nargs="+", metavar="KEY=VALUE", help="tags to set (a key set already is replaced)")

    def untag_args(parser: argparse.ArgumentParser) -> None:
        entity_args(parser)
        parser.add_argument("keys", nargs="+", metavar="KEY", help="tag keys to remove")

    def note_args(parser: argparse.ArgumentParser) -> None:
        entity_args(parser)
        parser.add_argument("text", help=f'the note (at most {NOTE_MAX} characters; "" removes it)')

    def path(ctx: Ctx, suffix: str) -> str:
        return f"{entity_path(ctx.args.project, kind, getattr(ctx.args, dest))}/{suffix}"

    @command(noun, "tag", help=f"set tags on a {what.split(' id')[0]} (ledger.annotate)")(tag_args)
    async def tag(ctx: Ctx) -> int:
        body = {"tags": parse_tags(ctx.args.tags)}
        written = await ctx.client.request("PUT", path(ctx, "tags"), body=body, params={"workspace": ctx.workspace})
        return _labels_shown(ctx, written, f"Tagged {getattr(ctx.args, dest)}.")

    @command(noun, "untag", help=f"remove tags from a {what.split(' id')[0]} (ledger.annotate)")(untag_args)
    async def untag(ctx: Ctx) -> int:
        params = {"workspace": ctx.workspace, "key": ctx.args.keys}
        written = await ctx.client.request("DELETE", path(ctx, "tags"), params=params)
        removed = written["record"]["removed"]
        return _labels_shown(ctx, written, f"Removed {', '.join(removed) or 'no tag'} from {getattr(ctx.args, dest)}.")

    @command(noun, "note", help=f"set a {what.split(' id')[0]}'s note (ledger.annotate)")(note_args)
    async def note(ctx: Ctx) -> int:
        body = {"text": ctx.args.text}
        written = await ctx.client.request("PUT", path(ctx, "note"), body=body, params={"workspace": ctx.workspace})
        return _labels_shown(ctx, written, f"Noted {getattr(ctx.args, dest)}.")


for _noun, (_kind, _dest, _what) in NOUNS.items():
    _add_commands(_noun, _kind, _dest, _what)


def _model_list_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")
    add_tag_filter(parser)
    parser.add_argument("--limit", type=int, default=50, help="at most this many (1..1000)")


@command("model", "list", help="a project's model versions, newest first, with their tags")(_model_list_args)
async def model_list(ctx: Ctx) -> int:
    a = ctx.args
    params = {"workspace": ctx.workspace, "tag": a.tag, "limit": a.limit}
    listing = await ctx.client.request("GET", f"/v1/projects/{a.project}/model-versions", params=params)
    if ctx.as_json:
        return done(ctx, listing)
    rows = [
        {
            "model_version": v["model_version_id"],
            "model": v["model_id"],
            "kind": v.get("kind") or "",
            "tags": tag_summary(v["tags"]),
            "created_at": v["created_at"],
        }
        for v in listing["model_versions"]
    ]
    return done(ctx, rows, title=f"Model versions of {a.project}")
