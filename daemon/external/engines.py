"""The engines' own libraries: a rendered plan checked by SkyPilot's or dstack's schema where it is installed, and
launched only through the engine's own client where the engine is configured (plans.py says what each relies on).

Both libraries are heavy and optional: they are imported inside the functions that need them. Where one is absent,
the check says it was skipped and the launch says the plan was rendered and nothing ran.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bashgym.client.errors import RuleRejected
from bashgym.daemon.external.plans import (
    LIBRARIES,
    Document,
    Engine,
    PlanOptions,
    RenderedPlan,
    render_plan,
)
from bashgym.trainers.contracts.request import TrainingRequest


def checked_plan(engine: Engine, request: TrainingRequest, options: PlanOptions) -> RenderedPlan:
    """Render, then check with the engine's library where it is installed."""
    return validate(render_plan(engine, request, options))


def validate(plan: RenderedPlan) -> RenderedPlan:
    """The plan with `validation` filled by the engine's own schema check, or saying why none ran."""
    module = LIBRARIES[plan.engine]
    if importlib.util.find_spec(module) is None:
        return dataclasses.replace(
            plan, validation=_unchecked(f"{plan.engine} is not installed; the schema check was skipped")
        )
    try:
        library = _import_quietly(plan.engine)
    except ImportError as exc:
        return dataclasses.replace(
            plan,
            validation=_unchecked(f"{plan.engine} is installed but does not import ({exc}); the check was skipped"),
        )
    try:
        _parse(plan.engine, copy.deepcopy(plan.document))
    except Exception as exc:  # the engine's own refusal, in its own words: any type its loader raises
        return dataclasses.replace(plan, validation=_checked(library, valid=False, reason=str(exc)))
    return dataclasses.replace(plan, validation=_checked(library, valid=True, reason=f"{library} accepts the plan"))


def _unchecked(reason: str) -> dict[str, Any]:
    return {"checked": False, "valid": None, "library": None, "reason": reason}


def _checked(library: str, *, valid: bool, reason: str) -> dict[str, Any]:
    return {"checked": True, "valid": valid, "library": library, "reason": reason}


def _import_quietly(engine: Engine) -> str:
    """Import the engine's library; its name and version."""
    # SkyPilot's import warns about its own dependencies' deprecations (SQLAlchemy's declarative_base): not ours.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        match engine:
            case "skypilot":
                import sky

                return f"skypilot {sky.__version__}"
            case "dstack":
                from dstack import version

                return f"dstack {version.__version__}"


def _parse(engine: Engine, document: Document, *, secrets: Mapping[str, str] | None = None) -> Any:
    """The engine's own object for `document`; raises the engine's error when it refuses it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        match engine:
            case "skypilot":
                import sky

                return sky.Task.from_yaml_config(document, secrets_overrides=list((secrets or {}).items()) or None)
            case "dstack":
                from dstack._internal.core.models.configurations import parse_run_configuration

                configuration = parse_run_configuration(document)
                for key, value in (secrets or {}).items():
                    configuration.env[key] = value
                return configuration


def launch_plan(
    plan: RenderedPlan,
    *,
    plan_path: Path,
    secrets: Mapping[str, str],
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Submit a written dstack plan (write_plan) through dstack's own client; `{"id": run name, "project": ...}`.
    (SkyPilot's are launched through the operator's `sky`: skypilot.py.)

    Blocking: call it in a thread. `secrets` holds the values of the
    names the plan declares; they go to the engine's client only. `home` is where `.dstack/config.yml` is looked
    for (default: this user's home, which dstack's client reads too).

    Raises:
        RuleRejected: the engine is not installed or not configured here, the plan failed its check, or a secret
            is missing; nothing ran, and the message says how to run it by hand or configure the engine.
    """
    if not plan.validation.get("checked"):
        plan = validate(plan)  # rendered with check=False, or elsewhere: the engine's check comes first
    reason = launch_refusal(plan, secrets=secrets, home=home if home is not None else Path.home())
    if reason is not None:
        raise RuleRejected(
            f"The {plan.engine} plan {plan.name} (sha256 {plan.digest[:12]}) was rendered and nothing ran: {reason}",
            hint=f"Run it by hand once the engine is set up: {plan.command}",
        )
    wanted = {name: secrets[name] for name in plan.secret_names}
    document = with_env(plan, env or {})
    return _launch_dstack(document, wanted, plan_path=plan_path)


def with_env(plan: RenderedPlan, env: Mapping[str, str]) -> Document:
    """A copy of the plan's document with `env` in its task's environment."""
    document = copy.deepcopy(plan.document)
    match plan.engine:
        case "skypilot":
            document["envs"] = {**document.get("envs", {}), **env}
        case "dstack":
            document["env"] = [*document.get("env", []), *(f"{key}={value}" for key, value in env.items())]
    return document


def launch_refusal(plan: RenderedPlan, *, secrets: Mapping[str, str], home: Path, sky_bin: str = "") -> str | None:
    """Why the plan cannot be launched from here, or None. `sky_bin`: the operator's `sky` (skypilot.py)."""
    checked = plan.validation
    if checked.get("checked") and not checked.get("valid"):
        return f"{checked['library']} refuses it ({checked['reason']}); fix the options and render it again."
    if plan.engine == "skypilot" and not sky_bin:  # launched only through the operator's `sky`, never our import
        return (
            "SkyPilot is not configured here: set BASHGYM_SKYPILOT_BIN to the `sky` of SkyPilot's own environment "
            "(and BASHGYM_SKYPILOT_API_URL to its API server, if not its default), restart the daemon, and launch "
            "again."
        )
    if plan.engine == "dstack" and importlib.util.find_spec(LIBRARIES[plan.engine]) is None:
        return (
            "dstack is not installed where the daemon runs; install it there (pip install dstack) and configure "
            "it, or run the plan by hand."
        )
    missing = [name for name in plan.secret_names if not secrets.get(name)]
    if missing:
        return (
            f"no value for the secret(s) {', '.join(missing)} the plan names: a task gets the daemon's job token "
            "($HF_JOB_TOKEN, BASHGYM_HF_JOB_TOKEN_ENV), never its own Hub token; set it where the daemon runs."
        )
    return _dstack_refusal(home) if plan.engine == "dstack" else None


def _dstack_refusal(home: Path) -> str | None:
    import yaml

    config = home / ".dstack" / "config.yml"
    try:
        projects = (yaml.safe_load(config.read_text()) or {}).get("projects") or []
    except (OSError, yaml.YAMLError, AttributeError):
        projects = []
    if not projects:
        return (
            f"no dstack project is configured ({config} names none); add one with "
            "`dstack project add --name NAME --url URL --token TOKEN`."
        )
    return None


def _launch_dstack(document: Document, secrets: dict[str, str], *, plan_path: Path) -> dict[str, str]:
    from dstack.api import Client

    configuration = _parse("dstack", document, secrets=secrets)
    client = Client.from_config()
    run = client.runs.apply_configuration(
        configuration=configuration, configuration_path=str(plan_path), reserve_ports=False
    )
    return {"id": str(run.name), "project": str(client.project)}
