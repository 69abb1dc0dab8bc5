"""A loopback stand-in of the Hugging Face Hub API surface huggingface_hub's upload path uses.

It records every request, keeps repositories and committed files in memory, and answers unknown
routes with a loud 404 naming the path (facts in PROTOCOLS.md). Model and dataset repositories are both
served (`/api/models/...`, `/api/datasets/...`). With `prefix` it serves the same API under a path, as the
NeMo Data Store does under `/v1/hf`; with `api_key` it answers 401 to any other bearer token; setting
`state.fail_with` to a status makes every request answer it (an outage, a revoked key).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPO_TYPES = {"models": "model", "datasets": "dataset"}


@dataclass
class Repo:
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)
    repo_type: str = "model"


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    tokens_seen: set[str] = field(default_factory=set)
    api_key: str | None = None
    fail_with: int | None = None


class _Handler(BaseHTTPRequestHandler):
    state: HubState
    base: str
    prefix: str = ""

    def log_message(self, *args: Any) -> None:  # quiet: the test reads state.requests instead
        return

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

    def _record(self) -> str | None:
        """The path under the prefix, or None once a reply (refusal, injected failure) has been sent."""
        self.state.requests.append((self.command, self.path))
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            self.state.tokens_seen.add(auth[7:])
        path = self.path.split("?")[0]
        if not path.startswith(self.prefix + "/"):
            self._reply(404, {"error": f"stand-in has no route {self.command} {path}"})
            return None
        if self.state.fail_with is not None:
            self._reply(self.state.fail_with, {"error": f"stand-in told to answer HTTP {self.state.fail_with}"})
            return None
        if self.state.api_key is not None and auth != f"Bearer {self.state.api_key}":
            self._reply(401, {"error": "Invalid credentials in Authorization header"})
            return None
        return path[len(self.prefix) :]

    def do_GET(self) -> None:
        path = self._record()
        if path is None:
            return
        if path == "/api/whoami-v2":
            self._reply(200, {"type": "user", "name": "tester", "orgs": [], "auth": {"type": "access_token"}})
            return
        parts = path.split("/")
        if len(parts) >= 5 and parts[1] == "api" and parts[2] in REPO_TYPES:
            repo_id = "/".join(parts[3:5])
            repo = self.state.repos.get(repo_id)
            if repo is None or repo.repo_type != REPO_TYPES[parts[2]]:
                self._reply(404, {"error": f"Repository {repo_id} not found"})
                return
            self._reply(
                200,
                {
                    "id": repo_id,
                    "private": repo.private,
                    "sha": repo.commits[-1] if repo.commits else None,
                    "siblings": [{"rfilename": name} for name in sorted(repo.files)],
                },
            )
            return
        self._reply(404, {"error": f"stand-in has no route GET {path}"})

    def do_POST(self) -> None:
        body = self._body()
        path = self._record()
        if path is None:
            return
        if path == "/api/repos/create":
            self._create(json.loads(body))
        elif path == "/api/validate-yaml":
            self._reply(200, {"errors": [], "warnings": []})
        elif "/preupload/" in path:
            files = json.loads(body).get("files", [])
            self._reply(
                200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            )
        elif "/commit/" in path:
            self._commit("/".join(path.split("/")[3:5]), body)
        else:
            self._reply(404, {"error": f"stand-in has no route POST {path}"})

    def _create(self, payload: dict[str, Any]) -> None:
        namespace = payload.get("organization") or "tester"
        repo_id = f"{namespace}/{payload['name']}"
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        url = f"{self.base}/{repo_id}"
        repo_type = payload.get("type") or "model"
        if repo_type == "dataset":
            url = f"{self.base}/datasets/{repo_id}"
        if repo_id in self.state.repos:
            self._reply(409, {"error": f"You already created this {repo_type} repo", "url": url})
            return
        self.state.repos[repo_id] = Repo(repo_id=repo_id, private=private, repo_type=repo_type)
        self._reply(200, {"url": url, "name": repo_id, "id": repo_id})

    def _commit(self, repo_id: str, body: bytes) -> None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            self._reply(404, {"error": f"Repository {repo_id} not found"})
            return
        for line in body.decode().splitlines():
            item = json.loads(line)
            if item.get("key") == "file":
                value = item["value"]
                repo.files[value["path"]] = base64.b64decode(value["content"])
        sha = hashlib.sha1(body).hexdigest()
        repo.commits.append(sha)
        self._reply(200, {"commitUrl": f"{self.base}/{repo_id}/commit/{sha}", "commitOid": sha, "success": True})


class HubStandIn:
    """Start with `with HubStandIn() as hub:`; point HF_ENDPOINT at hub.url (at hub.url + prefix with one)."""

    def __init__(self, *, prefix: str = "", api_key: str | None = None) -> None:
        self.state = HubState(api_key=api_key)
        handler = type("Handler", (_Handler,), {"state": self.state, "prefix": prefix.rstrip("/")})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        handler.base = self.url + prefix.rstrip("/")
        # A short poll interval: shutdown() waits for the loop's next look (0.5 s by default).
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
