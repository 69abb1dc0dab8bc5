"""A stand-in dstack server on 127.0.0.1: only the REST routes and fields the daemon's follower uses (dstack 0.22.5,
dstack/_internal/server/routers/runs.py and logs.py): `POST /api/project/{project}/runs/get` {run_name},
`POST .../runs/stop` {runs_names, abort}, `POST /api/project/{project}/logs/poll` {run_name, job_submission_id,
next_token?, limit} with base64 messages; `Authorization: Bearer TOKEN`, 403 for a wrong one as dstack answers."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class StandInRun:
    name: str
    status: str = "submitted"
    termination_reason: str | None = None
    submission_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    logs: list[str] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)


class DstackStandIn:
    """`with DstackStandIn(project, token) as server:` runs on a free port; `server.runs[name]` is its state."""

    def __init__(self, project: str, token: str) -> None:
        self.project = project
        self.token = token
        self.runs: dict[str, StandInRun] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> DstackStandIn:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, body: dict[str, Any], token: str) -> tuple[int, Any]:
        if token != f"Bearer {self.token}":
            return 403, {"detail": [{"msg": "Access denied", "code": "error"}]}
        prefix = f"/api/project/{self.project}/"
        if not path.startswith(prefix):
            return 404, {"detail": [{"msg": "Project not found", "code": "resource_not_exists"}]}
        match path.removeprefix(prefix):
            case "runs/get":
                run = self.runs.get(body["run_name"])
                return (200, self._run(run)) if run else (400, {"detail": [{"msg": "Run not found"}]})
            case "runs/stop":
                for name in body["runs_names"]:
                    self.runs[name].stops.append(body)
                    self.runs[name].status, self.runs[name].termination_reason = "terminating", "stopped_by_user"
                return 200, None
            case "logs/poll":
                return 200, self._logs(body)
        return 404, {"detail": [{"msg": "Not found"}]}

    def _run(self, run: StandInRun) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, run.name)),
            "project_name": self.project,
            "status": run.status,
            "status_message": run.status,
            "termination_reason": run.termination_reason,
            "latest_job_submission": {"id": run.submission_id, "submission_num": 0},
            "cost": 0.42,
            "error": None,
        }

    def _logs(self, body: dict[str, Any]) -> dict[str, Any]:
        run = self.runs[body["run_name"]]
        if body["job_submission_id"] != run.submission_id:
            return {"logs": [], "next_token": None}
        after = body.get("start_time")
        # One timestamp per line, each its own second (the runner gives every line its own); start_time excludes.
        first = 0 if after is None else int(after[17:19]) + 1
        start = max(first, int(body.get("next_token") or 0))
        page = run.logs[start : start + int(body.get("limit", 100))]
        events = [
            {"timestamp": _at(start + i), "log_source": "stdout", "message": base64.b64encode(line.encode()).decode()}
            for i, line in enumerate(page)
        ]
        end = start + len(page)
        return {"logs": events, "next_token": str(end) if end < len(run.logs) else None}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, answer = outer.answer(self.path, body, self.headers.get("Authorization", ""))
                data = json.dumps(answer).encode() if answer is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        return Handler


def _at(index: int) -> str:
    return f"2026-01-01T00:00:{index:02d}+00:00"
