"""A loopback stand-in of the Hugging Face Hub API surface huggingface_hub's upload path uses.

It records every request, keeps repositories and committed files in memory, and answers unknown
routes with a loud 404 naming the path (facts in PROTOCOLS.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Repo:
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    tokens_seen: set[str] = field(default_factory=set)


class _Handler(BaseHTTPRequestHandler):
    state: HubState
    base: str

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

    def _record(self) -> None:
        self.state.requests.append((self.command, self.path))
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            self.state.tokens_seen.add(auth[7:])

    def do_GET(self) -> None:
        self._record()
        path = self.path.split("?")[0]
        if path == "/api/whoami-v2":
            self._reply(200, {"type": "user", "name": "tester", "orgs": [], "auth": {"type": "access_token"}})
            return
        if path.startswith("/api/models/"):
            repo_id = "/".join(path.split("/")[3:5])
            repo = self.state.repos.get(repo_id)
            if repo is None:
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
        self._record()
        path = self.path.split("?")[0]
        body = self._body()
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
        if repo_id in self.state.repos:
            self._reply(409, {"error": "You already created this model repo", "url": url})
            return
        self.state.repos[repo_id] = Repo(repo_id=repo_id, private=private)
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
    """Start with `with HubStandIn() as hub:`; point HF_ENDPOINT at hub.url."""

    def __init__(self) -> None:
        self.state = HubState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        handler.base = self.url
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
