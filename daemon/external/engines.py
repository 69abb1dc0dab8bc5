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
    OUT_REMOTE,
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
    plan: RenderedPlan, *, plan_path: Path, secrets: Mapping[str, str], home: Path | None = None
) -> dict[str, str]:
    """Submit a written plan (write_plan) through the engine's own client; `{"engine_job_id": ...}`.

    Blocking, and for SkyPilot until the cluster is up: call it in a thread. `secrets` holds the values of the
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
    match plan.engine:
        case "skypilot":
            return _launch_skypilot(plan, wanted)
        case "dstack":
            return _launch_dstack(plan, wanted, plan_path=plan_path)


def launch_refusal(plan: RenderedPlan, *, secrets: Mapping[str, str], home: Path) -> str | None:
    """Why the plan cannot be launched from here, or None."""
    checked = plan.validation
    if checked.get("checked") and not checked.get("valid"):
        return f"{checked['library']} refuses it ({checked['reason']}); fix the options and render it again."
    if importlib.util.find_spec(LIBRARIES[plan.engine]) is None:
        return (
            f"{plan.engine} is not installed where the daemon runs; install it there "
            f"(pip install {plan.engine}) and configure it, or run the plan by hand."
        )
    missing = [name for name in plan.secret_names if not secrets.get(name)]
    if missing:
        return (
            f"no value for the secret(s) {', '.join(missing)} the plan names: a task gets the daemon's job token "
            "($HF_JOB_TOKEN, BASHGYM_HF_JOB_TOKEN_ENV), never its own Hub token; set it where the daemon runs."
        )
    match plan.engine:
        case "skypilot":
            return _skypilot_refusal()
        case "dstack":
            return _dstack_refusal(home)


def _skypilot_refusal() -> str | None:
    import sky

    # api_info asks the configured server and starts none: a daemon must not leave a SkyPilot server behind.
    try:
        sky.api_info()
        clouds = sky.get(sky.enabled_clouds())
    except Exception as exc:  # any failure to reach the server means the same to the caller: not configured
        return (
            f"no SkyPilot API server answers ({type(exc).__name__}: {exc}); start one with `sky api start` or log "
            "in to a team server with `sky api login -e URL`, then run `sky check`."
        )
    if not clouds:
        return "SkyPilot has no cloud or cluster enabled; set up credentials and run `sky check`."
    return None


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


def _launch_skypilot(plan: RenderedPlan, secrets: dict[str, str]) -> dict[str, str]:
    import sky

    task = _parse("skypilot", copy.deepcopy(plan.document), secrets=secrets)
    request_id = sky.launch(task, cluster_name=plan.name, down=bool(plan.document["file_mounts"].get(OUT_REMOTE)))
    job_id, _handle = sky.get(request_id)
    return {"engine_job_id": f"{plan.name}/{job_id}", "engine_request_id": str(request_id)}


def _launch_dstack(plan: RenderedPlan, secrets: dict[str, str], *, plan_path: Path) -> dict[str, str]:
    from dstack.api import Client

    configuration = _parse("dstack", copy.deepcopy(plan.document), secrets=secrets)
    client = Client.from_config()
    run = client.runs.apply_configuration(
        configuration=configuration, configuration_path=str(plan_path), reserve_ports=False
    )
    return {"engine_job_id": str(run.name)}
