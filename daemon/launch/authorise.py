"""The authorise stage: what a launch implies, authorised the same way on every path that starts a run.

A training request implies capabilities (training.launch; artifact.publish_private to push to the Hub;
artifact.publish_public for a public repository) and a Hub target (a namespace the operator allows).
The training routes judge them for their caller; the campaign runner for the campaign's owner, when the
campaign is validated and again at each launch, so a campaign never starts what its owner could not.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from bashgym.client.errors import Forbidden, InvalidInput
from bashgym.client.redaction import contains_secret
from bashgym.client.specs import UNASSIGNED, context_in_workspace
from bashgym.daemon.authority import Principal, actor_holds
from bashgym.daemon.settings import Settings
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest

# What keeping more than the adapter asks for: a standalone serving artifact is made to leave the workspace
# (a private publication's right); keeping every checkpoint and merged weights is for audited or promoted work,
# which a lead decides (promotion.decide).
RETENTION_CAPABILITIES = {"deployable": ("artifact.publish_private",), "full_run": ("promotion.decide",)}


def implied_capabilities(request: TrainingRequest) -> tuple[str, ...]:
    """Every capability a launch of `request` needs, the launch itself first."""
    needed = ["training.launch", *RETENTION_CAPABILITIES.get(request.artifact_retention, ())]
    if request.auto_push_hf:
        needed.append("artifact.publish_private")
        if not request.hf_private:
            needed.append("artifact.publish_public")
    return tuple(dict.fromkeys(needed))


def check_retention(request: TrainingRequest) -> None:
    """`full_run` keeps everything a run made: it says which audit it serves (tracking_context.metadata.audit)."""
    if request.artifact_retention != "full_run":
        return
    metadata = (request.tracking_context or {}).get("metadata")
    audit = metadata.get("audit") if isinstance(metadata, dict) else None
    if not (isinstance(audit, str) and audit.strip()):
        raise Forbidden(
            "artifact_retention full_run keeps every checkpoint and merged weights: it is for audited or promoted "
            "work, and this request names no audit.",
            hint="Say which audit it serves in tracking_context.metadata.audit, or keep adapter_only "
            "(adapter_checkpoint to stay resumable).",
            details={"field": "artifact_retention"},
        )


def publication(request: TrainingRequest) -> str:
    if not request.auto_push_hf:
        return "none"
    return "private" if request.hf_private else "public"


def check_hub_target(settings: Settings, request: TrainingRequest) -> None:
    """A push goes only into a namespace the operator allows (BASHGYM_HF_NAMESPACES), named explicitly."""
    if not request.auto_push_hf or not request.hf_repo_name:
        return  # no push, or the trainer refuses a push without a repository name
    namespace, _, name = request.hf_repo_name.rpartition("/")
    if not namespace:
        raise Forbidden(
            f"hf_repo_name {request.hf_repo_name!r} names no namespace; BashGym pushes only into a namespace the "
            "operator allows.",
            hint=f"Name it namespace/{name}, with a namespace from BASHGYM_HF_NAMESPACES.",
            details={"field": "hf_repo_name"},
        )
    if namespace not in settings.hf_namespaces:
        allowed = ", ".join(settings.hf_namespaces) or "none are configured"
        raise Forbidden(
            f"hf_repo_name {request.hf_repo_name!r} is in namespace {namespace!r}, which this daemon may not push "
            f"into (allowed: {allowed}).",
            hint="Ask the operator to add the namespace to BASHGYM_HF_NAMESPACES, or push into an allowed one.",
            details={"field": "hf_repo_name"},
        )


def authorise_launch(principal: Principal, settings: Settings, ws: str, project: str, request: TrainingRequest) -> str:
    """Raise Forbidden unless `principal` may launch `request` in `project`; answer its publication."""
    for capability in implied_capabilities(request):
        principal.require(capability, workspace_id=ws, project_id=project)
    return check_request(settings, request)


def check_request(settings: Settings, request: TrainingRequest) -> str:
    """What no capability allows: a credential in the request, full retention without an audit, a push outside the
    operator's namespaces. Answers the launch's publication."""
    check_no_credentials(request)
    check_publication(settings, request)
    return publication(request)


def check_publication(settings: Settings, request: TrainingRequest) -> None:
    """What the run keeps and where it pushes, as the operator allows (a campaign's recipe is checked so too)."""
    check_retention(request)
    check_hub_target(settings, request)


def recorded_project(request: TrainingRequest, ws: str) -> tuple[str, list[str]]:
    """The project a launch would be recorded under (`unassigned` without a complete context), and the context
    fields missing."""
    context, missing = context_in_workspace(request.tracking_context, ws)
    return (context.project_id if context else UNASSIGNED), missing


async def owner_may_launch(request: TrainingRequest, may: Callable[[str], Awaitable[bool]]) -> bool:
    """Whether a recorded owner (a campaign's) may launch `request`: `may` judges each implied capability, and may
    lend one or make the launch wait for a holder (answering False)."""
    for capability in implied_capabilities(request):
        if not await may(capability):
            return False
    return True


# Handled on the way in: the tracking context is redacted where it is written, a credential-shaped correlation id
# is replaced. Every other field reaches the trainer as sent (request.json, effective_config.json), so it must
# hold no secret to begin with.
REDACTED_ON_WRITE = frozenset({"tracking_context", "correlation_id"})


def check_no_credentials(request: TrainingRequest) -> None:
    """Refuse a request whose settings hold a credential-shaped value (a token in a model path or a repository
    name): the run keeps its request as sent, so the ledger never storing a secret means never taking one here.
    Tokens reach the trainer from the daemon's environment (HF_TOKEN), never from a request."""
    found = [
        name
        for name, value in request.model_dump(exclude=set(REDACTED_ON_WRITE)).items()
        if any(contains_secret(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, str))
    ]
    if found:
        raise InvalidInput(
            f"{', '.join(found)} {'holds' if len(found) == 1 else 'hold'} a credential-shaped value; a run keeps its "
            "settings as sent, and BashGym never stores a secret.",
            hint="Give tokens to the daemon's environment (HF_TOKEN), never in a request; rename a path or "
            "repository whose name looks like a token.",
            details={"fields": found},
        )


async def owner_lacks(ledger: Ledger, owner: str, ws: str, project: str, request: TrainingRequest) -> list[str]:
    """The capabilities a launch of `request` needs that the recorded actor `owner` lacks in `project` now."""
    return [
        capability
        for capability in implied_capabilities(request)
        if not await actor_holds(ledger, owner, capability, workspace_id=ws, project_id=project)
    ]


ISOLATED = "namespaces"  # the sandbox level where an attempt, and a dataset's check, run as uid 65534, read-only


def has_command_checks(path: Path) -> bool:
    """Whether a GRPO/RLVR dataset carries shell code of its author's: a row whose verifier kind is `command`.
    Every row is parsed as the trainer parses it: a raw-text shortcut missed a kind written `\u0063ommand`, and a
    row read without utf-8-sig missed one behind a byte-order mark (the trainer drops it, so does the contract)."""
    with path.open("rb") as rows:
        for line in rows:
            try:
                row = json.loads(line.decode("utf-8-sig", errors="replace"))
            except ValueError:
                continue  # the contract check has refused such a file already
            verifier = row.get("verifier") if isinstance(row, dict) else None
            if isinstance(verifier, dict) and verifier.get("kind") == "command":
                return True
    return False


def check_unisolated_checks(settings: Settings, levels: dict[str, str | None]) -> None:
    """A dataset's command checks run in the attempt's sandbox, so only where that isolates them: below
    `namespaces` they run as the trainer host's user and read what it reads (the admin token, on this host).
    `levels` names each host the run trains on with its sandbox level (None: not known)."""
    if settings.allow_unisolated_checks:
        return
    weak = {host: level for host, level in levels.items() if level != ISOLATED}
    if not weak:
        return
    said = ", ".join(f"{host} gives {level or 'an unknown level (preflight it again)'}" for host, level in weak.items())
    raise Forbidden(
        f"This dataset's rows carry command checks (verifier.kind command), its author's shell code; they run in "
        f"the attempt's sandbox, which isolates them only at the `namespaces` level, and {said}.",
        hint="Run the trainer where the sandbox isolates (root with unshare and setpriv; docs/security.md), "
        "use exact_match or terminal_task verifiers, or, trusting every dataset author with that host's user, "
        "set BASHGYM_ALLOW_UNISOLATED_CHECKS=true on the daemon.",
        details={"isolation": levels},
    )
