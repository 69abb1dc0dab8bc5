"""Reading an MLflow tracking server over its REST API 2.0, as `bashgym import mlflow` does: no `mlflow` package.

The user's process reads with the user's network and credentials (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME
and MLFLOW_TRACKING_PASSWORD, or user:password@ in the URI); they are sent to the tracking server only, never printed
or stored. What it reads becomes the wire models of client/imports.py, in batches the daemon takes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from bashgym.client.errors import ApiError, Forbidden, InvalidInput, NotFound, Unauthenticated
from bashgym.client.imports import (
    MAX_ARTIFACT_LISTING,
    MAX_IMPORT_RUNS,
    MAX_VALUE_CHARS,
    ImportedArtifact,
    ImportedRun,
    public_uri,
)
from bashgym.client.specs import MAX_METRIC_BATCH, MetricPoint
from bashgym.client.validation import METRIC_NAME_MAX, METRIC_NAME_RE

API = "/api/2.0/mlflow"
PAGE = 1000  # runs per runs/search page (MLflow's own cap is 50,000)
HISTORY_PAGE = 25_000  # points per metrics/get-history page
MAX_REQUEST_CHARS = 4 * 1024 * 1024  # a batch's JSON, well under the daemon's 8 MiB body limit


class MlflowReader:
    """One MLflow tracking server, read with `async with`."""

    def __init__(self, tracking_uri: str, environ: Mapping[str, str], *, timeout_s: float = 30.0) -> None:
        parts = urlsplit(tracking_uri)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise InvalidInput(
                f"--tracking-uri {public_uri(tracking_uri)!r} is not an http(s) URL of an MLflow tracking server.",
                hint="Name the server as MLflow's clients do: --tracking-uri http://HOST:5000 (a file: or "
                "databricks URI is not read; run `mlflow server` over that store and name it).",
            )
        self.uri = public_uri(tracking_uri)
        base = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path.rstrip("/"), "", ""))
        headers, auth = _credentials(parts.username, parts.password, environ)
        self._http = httpx.AsyncClient(base_url=base, headers=headers, auth=auth, timeout=timeout_s)

    async def __aenter__(self) -> MlflowReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def fetch_experiment(self, name: str) -> dict[str, Any]:
        answer = await self._get("/experiments/get-by-name", {"experiment_name": name}, what=f"experiment {name!r}")
        return dict(answer["experiment"])

    async def fetch_runs(self, experiment_id: str) -> list[dict[str, Any]]:
        """Every run of the experiment (active and deleted alike are MLflow's to show: active only), paged."""
        runs: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            body: dict[str, Any] = {"experiment_ids": [experiment_id], "max_results": PAGE, "order_by": ["start_time"]}
            if token:
                body["page_token"] = token
            answer = await self._call("POST", "/runs/search", what=f"runs of experiment {experiment_id}", json=body)
            runs += answer.get("runs") or []
            token = answer.get("next_page_token")
            if not token:
                return runs

    async def fetch_history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        points: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query = {"run_id": run_id, "metric_key": key, "max_results": str(HISTORY_PAGE)}
            if token:
                query["page_token"] = token
            answer = await self._get("/metrics/get-history", query, what=f"metric {key!r} of run {run_id}")
            points += answer.get("metrics") or []
            token = answer.get("next_page_token")
            if not token:
                return points

    async def fetch_artifacts(self, run_id: str) -> tuple[list[ImportedArtifact], bool]:
        """The run's artifact files (paths and sizes), walking directories; and whether the listing is complete."""
        files: list[ImportedArtifact] = []
        pending = [""]
        while pending:
            path = pending.pop()
            query = {"run_id": run_id, **({"path": path} if path else {})}
            answer = await self._get("/artifacts/list", query, what=f"artifacts of run {run_id}")
            for entry in answer.get("files") or []:
                if entry.get("is_dir"):
                    pending.append(str(entry["path"]))
                    continue
                if len(files) == MAX_ARTIFACT_LISTING:
                    return files, False
                size = entry.get("file_size")
                files.append(
                    ImportedArtifact(path=str(entry["path"]), size_bytes=int(size) if size is not None else None)
                )
        return files, True

    async def _get(self, path: str, query: dict[str, str], *, what: str) -> dict[str, Any]:
        return await self._call("GET", path, what=what, params=query)

    async def _call(self, method: str, path: str, *, what: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._http.request(method, f"{API}{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(
                0,
                "mlflow_unreachable",
                f"MLflow at {self.uri} did not answer reading {what} ({type(exc).__name__}: {exc}).",
                hint="Check --tracking-uri (is `mlflow server` running there, reachable from this machine?), then "
                "import again: runs already imported are not imported twice.",
            ) from exc
        if response.status_code == 200:
            answer: dict[str, Any] = response.json()
            return answer
        raise _refusal(self.uri, what, response)


def _credentials(
    username: str | None, password: str | None, environ: Mapping[str, str]
) -> tuple[dict[str, str], httpx.BasicAuth | None]:
    """MLflow's own client conventions: a bearer token, else basic auth from the environment or the URI."""
    token = environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}, None
    user = environ.get("MLFLOW_TRACKING_USERNAME") or unquote(username or "")
    secret = environ.get("MLFLOW_TRACKING_PASSWORD") or unquote(password or "")
    return {}, httpx.BasicAuth(user, secret) if user else None


def _refusal(uri: str, what: str, response: httpx.Response) -> Exception:
    try:
        said = str(response.json().get("message") or "")
    except ValueError:
        said = response.text[:200]
    status = response.status_code
    message = f"MLflow at {uri} answered {status} reading {what}: {said}"
    if status == 404:
        return NotFound(
            message,
            hint="Check the experiment's name as MLflow shows it (`mlflow experiments search`, or the MLflow UI); "
            "names are case-sensitive.",
        )
    if status in {401, 403}:
        kind = Unauthenticated if status == 401 else Forbidden
        return kind(
            message,
            hint="Give MLflow's credentials as its own clients take them: MLFLOW_TRACKING_TOKEN, or "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, in this shell's environment.",
        )
    return ApiError(status, "mlflow_error", message, hint="Check the MLflow server's log, then import again.")


def ledger_metric_name(name: str) -> str:
    """A ledger metric name for an MLflow one: characters the ledger does not take become `_`."""
    cleaned = re.sub(r"[^A-Za-z0-9_.:/-]", "_", name)
    if not cleaned[:1].isalnum():
        cleaned = f"m{cleaned}"
    return cleaned[:METRIC_NAME_MAX]


def metric_names(keys: list[str]) -> dict[str, str]:
    """Each MLflow metric key's ledger name; two keys that clean to one name are told apart by a suffix."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for key in sorted(keys):
        name, n = ledger_metric_name(key), 1
        while name in taken or not METRIC_NAME_RE.match(name):
            n += 1
            name = f"{ledger_metric_name(key)[: METRIC_NAME_MAX - 4]}_{n}"
        taken.add(name)
        names[key] = name
    return names


def history_points(metric: str, history: list[dict[str, Any]]) -> tuple[list[MetricPoint], int]:
    """The ledger's points of one MLflow metric history, and how many it left out: a non-finite value or a negative
    step, which the ledger does not hold, and an earlier value at a step logged again (the last one logged stays)."""
    latest: dict[int, dict[str, Any]] = {}
    left_out = 0
    for raw in history:
        value, step = raw.get("value"), int(raw.get("step") or 0)
        if not isinstance(value, int | float) or not math.isfinite(value) or step < 0:
            left_out += 1
            continue
        if step in latest:
            left_out += 1
            if int(raw.get("timestamp") or 0) < int(latest[step].get("timestamp") or 0):
                continue
        latest[step] = raw
    points = [
        MetricPoint(metric=metric, step=step, value=float(raw["value"]), time=_seconds(raw.get("timestamp")))
        for step, raw in sorted(latest.items())
    ]
    return points, left_out


def _seconds(timestamp_ms: Any) -> float | None:
    return int(timestamp_ms) / 1000 if timestamp_ms is not None else None


def cut_values(values: list[dict[str, Any]], kind: str) -> tuple[dict[str, str], list[str]]:
    """MLflow's key/value list as a mapping, each value cut at MAX_VALUE_CHARS; and the names cut, as `kind.key`."""
    kept: dict[str, str] = {}
    cut: list[str] = []
    for entry in values:
        key, value = str(entry["key"])[:250], str(entry.get("value") or "")
        if len(value) > MAX_VALUE_CHARS:
            cut.append(f"{kind}.{key}")
            value = value[:MAX_VALUE_CHARS]
        kept[key] = value
    return kept, cut


def pieces(run: ImportedRun, points: list[MetricPoint]) -> Iterator[ImportedRun]:
    """The run as one or more parts of at most MAX_METRIC_BATCH points each (always at least one)."""
    yield run.model_copy(update={"points": points[:MAX_METRIC_BATCH]})
    for start in range(MAX_METRIC_BATCH, len(points), MAX_METRIC_BATCH):
        yield run.model_copy(update={"points": points[start : start + MAX_METRIC_BATCH]})


def batches(parts: list[ImportedRun]) -> Iterator[list[ImportedRun]]:
    """Parts packed into requests the daemon takes: at most MAX_IMPORT_RUNS parts, MAX_METRIC_BATCH points and
    about MAX_REQUEST_CHARS of JSON each."""
    batch: list[ImportedRun] = []
    points = chars = 0
    for part in parts:
        size = len(part.model_dump_json())
        if batch and (
            len(batch) == MAX_IMPORT_RUNS
            or points + len(part.points) > MAX_METRIC_BATCH
            or chars + size > MAX_REQUEST_CHARS
        ):
            yield batch
            batch, points, chars = [], 0, 0
        batch.append(part)
        points += len(part.points)
        chars += size
    if batch:
        yield batch
