"""A loopback stand-in of the Hugging Face Hub: the upload, download, whoami and Jobs routes huggingface_hub uses.

It records every request (`state.requests`, (method, path) pairs), keeps repositories, commits and jobs in memory,
and answers unknown routes with a loud 404 naming the method and path (facts in PROTOCOLS.md). Model and dataset
repositories are both served (`/api/models/...`, `/api/datasets/...`). With `prefix` it serves the same API under a
path, as the NeMo Data Store does under `/v1/hf`. Jobs live in tests/support/hub_jobs.py, which names the facts
about the Jobs routes it relies on.

Who may do what:
- With neither `api_key` nor `tokens`, anyone is "tester" with write access everywhere (private repos included).
- With `api_key`, any other bearer token (or none) gets 401; the key is "tester" with write access everywhere.
- With `tokens` ({token: TokenInfo}), an unknown bearer token gets 401 on any route; no token reads public repos only.
  A read-role token gets 403 on a write route (repo create, preupload, commit, run_job, cancel_job). A private repo
  exists only for a token whose user or one of whose orgs owns its namespace: anyone else gets 404 "Repository not
  found", as from the Hub; writing to another namespace's public repo is 403, and so is any Jobs route of a
  namespace the token is not in. A fine-grained token (role "fineGrained") does only what its scoped grants allow
  within those namespaces: reading a private repo needs `repo.content.read` (or `repo.write`) on the repo or its
  namespace, writing `repo.write`, creating a repo `repo.write` on the namespace, the Jobs routes `job.write`.

Faults: `fail_next(status, count, retry_after=...)` makes the next `count` requests (any route) answer `status`;
`state.fail_with` makes every request answer it until reset (an outage, a revoked key).

Facts relied on, read from huggingface_hub 2.4.0:
- Errors: hf_raise_for_status reads `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound) and
  `X-Error-Message`, and the JSON body's `error`; a 401 whose X-Error-Message is "Invalid credentials in
  Authorization header" is a bad token, not a missing repo. Retries (http_backoff: 408, 429, 5xx) wait the integer
  `Retry-After` seconds + 1, or 1 s, 2 s, ... without one; list calls (list_jobs, list_repo_tree) retry, plain
  GETs (model_info, inspect_job, whoami) and the download HEAD do not.
- whoami-v2: `{type: "user", name, orgs: [{name}], auth: {type: "access_token", accessToken: {displayName, role}}}`;
  a fine-grained token's role is "fineGrained" and its accessToken also carries `fineGrained: {canReadGatedRepos,
  global: [permission], scoped: [{entity: {_id, type: "user" | "org" | "model", name}, permissions: [...]}]}`, an
  entity being a namespace (user or org) or one repo (its id as name), as the Hub answers for such tokens.
- Downloads: hf_hub_download HEADs `/{repo}/resolve/{revision}/{file}` (`/datasets/{repo}/...` for datasets; the
  revision URL-quoted) and needs `X-Repo-Commit` and `ETag` (the git blob sha1, quoted; `Content-Length` gives the
  size); no `X-Xet-Hash`, so the client downloads with a plain GET, which honours `Range`. snapshot_download reads
  `/api/{type}s/{repo}/revision/{rev}` for the commit sha (`sha`), then `/tree/{sha}?recursive=True` (entries
  `{type: "file", oid, size, path}`). `siblings` carry `size` and `blobId` only when asked with `blobs=True`.
- Revisions: "main" and the head commit's sha are the current files; an older commit's sha its files then. A repo
  seeded with files but no commit answers a sha derived from its files.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.hub_jobs import HubJobs, JobRecord, check_spec, checked_mode

REPO_TYPES = {"models": "model", "datasets": "dataset"}
BAD_TOKEN = "Invalid credentials in Authorization header"
NO_REPO = "Repository not found"


@dataclass
class Repo:
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)
    repo_type: str = "model"
    snapshots: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit sha -> the files at that commit

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    def head(self) -> str:
        return self.commits[-1] if self.commits else _tree_sha(self.files)

    def at(self, revision: str) -> dict[str, bytes] | None:
        """The files at a revision ("main", or a commit sha), or None for a revision the repo lacks."""
        if revision in ("main", self.head()):
            return self.files
        return self.snapshots.get(revision)

    def commit(self, files: Mapping[str, bytes], deleted: Iterable[str] = ()) -> str:
        """Apply a commit: delete paths (a path ending in "/" deletes the folder), then write files; its sha."""
        for path in deleted:
            for name in [n for n in self.files if n == path or (path.endswith("/") and n.startswith(path))]:
                del self.files[name]
        self.files.update(files)
        sha = hashlib.sha1(f"{self.head()}\n{_tree_sha(self.files)}\n{len(self.commits)}".encode()).hexdigest()
        self.commits.append(sha)
        self.snapshots[sha] = dict(self.files)
        return sha


# A fine-grained grant of the first permission also grants the second (the Hub's token form ticks both).
IMPLIED = {"repo.write": "repo.content.read"}


@dataclass(frozen=True)
class TokenInfo:
    """Who a bearer token is: its user, its role ("read", "write" or "fineGrained") and the orgs the user belongs
    to. A fine-grained token's `scoped` grants are (entity, permissions) pairs, the entity a namespace or a repo id;
    `global_permissions` are the grants of no entity (discussion.write, inference.serverless.write, ...)."""

    user: str
    role: str = "write"
    orgs: tuple[str, ...] = ()
    display_name: str = "stand-in token"
    scoped: tuple[tuple[str, tuple[str, ...]], ...] = ()
    global_permissions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ("read", "write", "fineGrained"):
            raise ValueError(f"role must be 'read', 'write' or 'fineGrained', got {self.role!r}")

    def owns(self, namespace: str) -> bool:
        return namespace == self.user or namespace in self.orgs

    def may(self, permission: str, target: str) -> bool:
        """Whether this token may `permission` (repo.content.read, repo.write, job.write) on `target`, a namespace
        or a repo id: a classic token wherever its user may (writing with the write role only), a fine-grained one
        only where a scoped grant says so."""
        namespace = target.split("/")[0]
        if not self.owns(namespace):
            return False
        if self.role != "fineGrained":
            return self.role == "write" or permission.endswith(".read")
        return any(
            entity in (namespace, target) and (permission in granted or permission in map(IMPLIED.get, granted))
            for entity, granted in self.scoped
        )

    def access_token(self) -> dict[str, Any]:
        """whoami-v2's `auth.accessToken` for this token."""
        answer: dict[str, Any] = {"displayName": self.display_name, "role": self.role}
        if self.role == "fineGrained":
            answer["fineGrained"] = {
                "canReadGatedRepos": False,
                "global": list(self.global_permissions),
                "scoped": [
                    {"entity": _entity(entity, self.user), "permissions": list(granted)}
                    for entity, granted in self.scoped
                ],
            }
        return answer


def _entity(name: str, user: str) -> dict[str, str]:
    kind = "model" if "/" in name else "user" if name == user else "org"
    return {"_id": hashlib.sha1(name.encode()).hexdigest()[:24], "type": kind, "name": name}


ANYONE = TokenInfo("tester")  # who every caller is without `tokens`


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, bearer token or None)
    tokens_seen: set[str] = field(default_factory=set)
    api_key: str | None = None
    tokens: dict[str, TokenInfo] | None = None
    fail_with: int | None = None
    fail_queue: list[tuple[int, float | None]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition, repr=False, compare=False)


class _Handler(BaseHTTPRequestHandler):
    state: HubState
    jobs: HubJobs
    base: str
    prefix: str = ""
    who: TokenInfo | None  # the caller, None when anonymous under `tokens`

    def log_message(self, *args: Any) -> None:  # quiet: the test reads state.requests instead
        return

    # -- answering -------------------------------------------------------------------------------------------------

    def _reply(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, message: str, code: str | None = None, **headers: str) -> None:
        extra = {"X-Error-Message": message, **headers}
        if code is not None:
            extra["X-Error-Code"] = code
        self._reply(status, {"error": message}, extra)

    def _no_route(self, path: str) -> None:
        self._reply(404, {"error": f"stand-in has no route {self.command} {path}"})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

    # -- who is asking ---------------------------------------------------------------------------------------------

    def _record(self) -> str | None:
        """The path under the prefix, or None once a reply (refusal, injected failure) has been sent."""
        state = self.state
        with state.changed:
            state.requests.append((self.command, self.path))
            auth = self.headers.get("Authorization", "")
            bearer = auth[7:] if auth.startswith("Bearer ") else None
            state.calls.append((self.command, self.path, bearer))
            if bearer is not None:
                state.tokens_seen.add(bearer)
        path = self.path.split("?")[0]
        if not path.startswith(self.prefix + "/"):
            self._no_route(path)
            return None
        with state.changed:
            injected = state.fail_queue.pop(0) if state.fail_queue else None
        if injected is not None:
            status, retry_after = injected
            headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
            self._reply(status, {"error": f"stand-in told to answer HTTP {status}"}, headers)
            return None
        if state.fail_with is not None:
            self._reply(state.fail_with, {"error": f"stand-in told to answer HTTP {state.fail_with}"})
            return None
        self.who = ANYONE
        if state.api_key is not None and auth != f"Bearer {state.api_key}":
            self._error(401, BAD_TOKEN)
            return None
        if state.tokens is not None:
            token = auth[7:] if auth.startswith("Bearer ") else None
            if token is not None and token not in state.tokens:
                self._error(401, BAD_TOKEN)
                return None
            self.who = None if token is None else state.tokens[token]
        return path[len(self.prefix) :]

    def _may(self, permission: str, target: str) -> bool:
        return self.state.tokens is None or (self.who is not None and self.who.may(permission, target))

    def _may_write(self, what: str, permission: str = "repo.write", target: str | None = None) -> bool:
        """Whether the caller may `what` (`permission` on `target`, a namespace or repo id); False once the refusal
        has been sent."""
        if self.who is None:
            self._error(401, f"{what} needs a token")
        elif self.who.role == "read":
            self._error(403, f"{what} needs a token with the write role; this token's role is read")
        elif target is not None and not self._may(permission, target):
            self._error(403, f"{self.who.user} may not {what} in {target} ({permission} is not granted)")
        else:
            return True
        return False

    def _readable_repo(self, repo_type: str, repo_id: str) -> Repo | None:
        """The repo if it exists for this caller; None once the Hub's 404 has been sent."""
        with self.state.changed:
            repo = self.state.repos.get(repo_id)
        hidden = repo is not None and repo.private and not self._may("repo.content.read", repo_id)
        if repo is None or repo.repo_type != repo_type or hidden:
            self._error(404, NO_REPO, "RepoNotFound")
            return None
        return repo

    # -- routes ----------------------------------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self._record()
        if path is None:
            return
        parts = [unquote(p) for p in path.split("/")]
        query = parse_qs(urlsplit(self.path).query)
        if path == "/api/whoami-v2":
            self._whoami()
        elif parts[1:3] == ["api", "jobs"] and self.command == "GET":
            self._jobs_get(parts[3:], query)
        elif len(parts) >= 5 and parts[1] == "api" and parts[2] in REPO_TYPES:
            self._repo_api(REPO_TYPES[parts[2]], "/".join(parts[3:5]), parts[5:], query)
        elif len(parts) >= 6 and parts[3] == "resolve":
            self._resolve("model", "/".join(parts[1:3]), parts[4], "/".join(parts[5:]))
        elif len(parts) >= 7 and parts[1] == "datasets" and parts[4] == "resolve":
            self._resolve("dataset", "/".join(parts[2:4]), parts[5], "/".join(parts[6:]))
        else:
            self._no_route(path)

    def do_POST(self) -> None:
        body = self._body()
        path = self._record()
        if path is None:
            return
        parts = path.split("/")
        if path == "/api/repos/create":
            self._create(json.loads(body))
        elif path == "/api/validate-yaml":
            self._reply(200, {"errors": [], "warnings": []})
        elif parts[1:3] == ["api", "jobs"] and len(parts) in (4, 6):
            self._jobs_post(parts[3:], body)
        elif len(parts) >= 7 and parts[1] == "api" and parts[2] in REPO_TYPES and parts[5] == "preupload":
            if self._writable_repo(REPO_TYPES[parts[2]], "/".join(parts[3:5]), "preupload") is not None:
                files = json.loads(body).get("files", [])
                self._reply(
                    200,
                    {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]},
                )
        elif len(parts) >= 7 and parts[1] == "api" and parts[2] in REPO_TYPES and parts[5] == "commit":
            self._commit(REPO_TYPES[parts[2]], "/".join(parts[3:5]), body)
        else:
            self._no_route(path)

    def _whoami(self) -> None:
        who = self.who
        if who is None:
            self._error(401, BAD_TOKEN)
            return
        self._reply(
            200,
            {
                "type": "user",
                "id": who.user.encode().hex()[:24],
                "name": who.user,
                "fullname": who.user,
                "orgs": [{"type": "org", "name": org} for org in who.orgs],
                "auth": {"type": "access_token", "accessToken": who.access_token()},
            },
        )

    # -- repositories ----------------------------------------------------------------------------------------------

    def _create(self, payload: dict[str, Any]) -> None:
        if not self._may_write("create a repo"):
            return
        assert self.who is not None
        namespace = payload.get("organization") or self.who.user
        if not self._may("repo.write", namespace):
            self._error(403, f"You don't have the rights to create a repo under the namespace {namespace}")
            return
        repo_id = f"{namespace}/{payload['name']}"
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        url = f"{self.base}/{repo_id}"
        repo_type = payload.get("type") or "model"
        if repo_type == "dataset":
            url = f"{self.base}/datasets/{repo_id}"
        with self.state.changed:
            exists = repo_id in self.state.repos
            if not exists:
                self.state.repos[repo_id] = Repo(repo_id=repo_id, private=private, repo_type=repo_type)
        if exists:
            self._reply(409, {"error": f"You already created this {repo_type} repo", "url": url})
            return
        self._reply(200, {"url": url, "name": repo_id, "id": repo_id})

    def _writable_repo(self, repo_type: str, repo_id: str, what: str) -> Repo | None:
        repo = self._readable_repo(repo_type, repo_id)
        if repo is None or not self._may_write(what, "repo.write", repo.repo_id):
            return None
        return repo

    def _commit(self, repo_type: str, repo_id: str, body: bytes) -> None:
        repo = self._writable_repo(repo_type, repo_id, "commit")
        if repo is None:
            return
        files: dict[str, bytes] = {}
        deleted: list[str] = []
        for line in body.decode().splitlines():
            item = json.loads(line)
            if item.get("key") == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item.get("key") in ("deletedFile", "deletedFolder"):
                path = item["value"]["path"]
                deleted.append(path if item["key"] == "deletedFile" else path.rstrip("/") + "/")
        with self.state.changed:
            sha = repo.commit(files, deleted)
        self._reply(200, {"commitUrl": f"{self.base}/{repo_id}/commit/{sha}", "commitOid": sha, "success": True})

    def _repo_api(self, repo_type: str, repo_id: str, rest: list[str], query: dict[str, list[str]]) -> None:
        if self.command != "GET":
            self._no_route(self.path)
            return
        repo = self._readable_repo(repo_type, repo_id)
        if repo is None:
            return
        revision = "main"
        if rest[:1] in (["revision"], ["tree"]) and len(rest) >= 2:
            revision = rest[1]
        elif rest:
            self._no_route(self.path.split("?")[0])
            return
        with self.state.changed:
            sha = repo.head() if revision == "main" else revision
            files = repo.at(revision)
            files = None if files is None else dict(files)
        if files is None:
            self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        elif rest[:1] == ["tree"]:
            self._tree(files, "/".join(rest[2:]), _flag(query, "recursive"))
        else:
            blobs = _flag(query, "blobs")
            siblings = [
                {"rfilename": name, **({"size": len(data), "blobId": _blob_sha(data)} if blobs else {})}
                for name, data in sorted(files.items())
            ]
            info = {"id": repo_id, "author": repo.namespace, "private": repo.private, "sha": sha}
            self._reply(200, {**info, "gated": False, "disabled": False, "siblings": siblings})

    def _tree(self, files: dict[str, bytes], under: str, recursive: bool) -> None:
        prefix = under.strip("/") + "/" if under.strip("/") else ""
        entries: dict[str, dict[str, Any]] = {}
        for name, data in sorted(files.items()):
            if not name.startswith(prefix):
                continue
            folders = name[len(prefix) :].split("/")[:-1]
            for depth in range(len(folders) if recursive else min(1, len(folders))):
                folder = prefix + "/".join(folders[: depth + 1])
                entries.setdefault(folder, {"type": "directory", "oid": _tree_sha({folder: b""}), "path": folder})
            if recursive or not folders:
                entries[name] = {"type": "file", "oid": _blob_sha(data), "size": len(data), "path": name}
        if prefix and not entries:
            self._error(404, f"{under} does not exist on this revision", "EntryNotFound")
            return
        self._reply(200, list(entries.values()))

    def _resolve(self, repo_type: str, repo_id: str, revision: str, filename: str) -> None:
        repo = self._readable_repo(repo_type, repo_id)
        if repo is None:
            return
        with self.state.changed:
            files = repo.at(revision)
            commit = repo.head() if revision == "main" else revision
            data = None if files is None else files.get(filename)
        if files is None:
            self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            return
        if data is None:
            self._error(404, f"Entry not found: {filename}", "EntryNotFound", **{"X-Repo-Commit": commit})
            return
        start = _range_start(self.headers.get("Range"), len(data))
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{_blob_sha(data)}"')
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Accept-Ranges", "bytes")
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # -- jobs ------------------------------------------------------------------------------------------------------

    def _jobs_get(self, rest: list[str], query: dict[str, list[str]]) -> None:
        if rest == ["hardware"]:
            self._reply(200, self.jobs.hardware)
            return
        if not rest or not self._in_namespace(rest[0]):
            return
        if len(rest) == 1:
            self._reply(200, self.jobs.listing(rest[0], query.get("stage", []), query.get("label", [])))
            return
        job = self.jobs.find(rest[0], rest[1])
        if job is None:
            self._error(404, "Job not found")
        elif len(rest) > 3 or (len(rest) == 3 and rest[2] not in ("logs", "metrics")):
            self._no_route(self.path)
        elif len(rest) == 2:
            self._reply(200, job.to_json())
        elif rest[2] == "metrics" and job.stage in ("COMPLETED", "ERROR", "CANCELED", "DELETED"):
            self._error(406, "Job is not running")
        else:
            tail = query.get("tail")
            self._sse(lambda write: self._stream(job, rest[2], int(tail[0]) if tail else None, write))

    def _stream(self, job: JobRecord, route: str, tail: int | None, write: Any) -> None:
        if route == "logs":
            self.jobs.stream_logs(job, tail, write)
        else:
            self.jobs.stream_metrics(job, write)

    def _sse(self, produce: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()

        # The client may stop reading early (follow=False metrics keep only the first sample).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            produce(write)

    def _jobs_post(self, rest: list[str], body: bytes) -> None:
        namespace = rest[0]
        if len(rest) == 3 and rest[2] != "cancel":
            self._no_route(self.path)
            return
        what = "run a job" if len(rest) == 1 else "cancel a job"
        if not self._may_write(what, "job.write", namespace):
            return
        if len(rest) == 3:
            job = self.jobs.find(namespace, rest[1])
            if job is None:
                self._error(404, "Job not found")
                return
            self.jobs.cancel(job)
            self._reply(200, job.to_json())
            return
        try:
            spec = json.loads(body)
        except ValueError:
            spec = None
        problem = check_spec(spec, [h["name"] for h in self.jobs.hardware])
        if problem is not None:
            self._error(400, problem)
            return
        assert self.who is not None
        owner_type = "user" if namespace == self.who.user else "org"
        job = self.jobs.create(namespace, spec, owner_type, self.who.user)
        self._reply(200, job.to_json())

    def _in_namespace(self, namespace: str) -> bool:
        """Jobs routes need a caller in the namespace; False once the refusal has been sent."""
        if self.who is None:
            self._error(401, "Jobs routes need a token")
        elif not self._may("job.read", namespace) and not self._may("job.write", namespace):
            self._error(403, f"{self.who.user} is not a member of the namespace {namespace}")
        else:
            return True
        return False


class HubStandIn:
    """Start with `with HubStandIn() as hub:`; point HF_ENDPOINT at hub.url (at hub.url + prefix with one).

    `job_mode` ("scripted" or "execute", see tests/support/hub_jobs.py) applies to jobs created after it is set;
    `hardware` replaces the /api/jobs/hardware list (entries shaped like hub_jobs.hardware(...));
    `stream_idle_close_s` ends quiet log streams early (see hub_jobs.py for what that costs). Leaving the
    `with` block ends every log stream and kills every executing job's process group."""

    def __init__(
        self,
        *,
        prefix: str = "",
        api_key: str | None = None,
        tokens: Mapping[str, TokenInfo] | None = None,
        job_mode: str = "scripted",
        hardware: list[dict[str, Any]] | None = None,
        stream_idle_close_s: float | None = None,
    ) -> None:
        self.state = HubState(api_key=api_key, tokens=None if tokens is None else dict(tokens))
        self.jobs = HubJobs(
            self.state.jobs, self.state.changed, mode=job_mode, hardware=hardware, idle_close_s=stream_idle_close_s
        )
        handler: type[_Handler] = type(
            "Handler", (_Handler,), {"state": self.state, "jobs": self.jobs, "prefix": prefix.rstrip("/")}
        )
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        handler.base = self.url + prefix.rstrip("/")
        self.jobs.endpoint = handler.base
        # A short poll interval: shutdown() waits for the loop's next look (0.5 s by default).
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def job_mode(self) -> str:
        return self.jobs.mode

    @job_mode.setter
    def job_mode(self, mode: str) -> None:
        self.jobs.mode = checked_mode(mode)

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.jobs.close()
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, status: int, count: int = 1, *, retry_after: float | None = None) -> None:
        """The next `count` requests, whatever their route, answer `status` (with Retry-After when given)."""
        with self.state.changed:
            self.state.fail_queue.extend([(status, retry_after)] * count)

    def add_repo(
        self, repo_id: str, *, repo_type: str = "model", files: Mapping[str, bytes], private: bool = False
    ) -> str:
        """Seed a repo (or add a commit to one) without the client; the new commit's sha."""
        with self.state.changed:
            repo = self.state.repos.get(repo_id)
            if repo is None:
                repo = self.state.repos[repo_id] = Repo(repo_id, private=private, repo_type=repo_type)
            elif repo.repo_type != repo_type:
                raise ValueError(f"{repo_id} is a {repo.repo_type} repo, not a {repo_type} one")
            return repo.commit(files)

    def advance(
        self,
        job_id: str,
        stage: str | None = None,
        *,
        logs: Iterable[str] = (),
        metrics: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        message: str | None = None,
    ) -> JobRecord:
        """Drive a job: append log lines and metric samples, then move it to `stage` ("RUNNING", "COMPLETED",
        "ERROR", "CANCELED") with `message`."""
        return self.jobs.advance(job_id, stage, logs=logs, metrics=metrics, message=message)


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or ["false"])[0].lower() in ("1", "true")


def _blob_sha(data: bytes) -> str:
    """Git's blob sha1, which the Hub answers as a regular file's ETag and blobId."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_sha(files: Mapping[str, bytes]) -> str:
    return hashlib.sha1(
        "".join(f"{name}\0{_blob_sha(data)}\n" for name, data in sorted(files.items())).encode()
    ).hexdigest()


def _range_start(header: str | None, size: int) -> int:
    """The start of a `Range: bytes=N-` request (the only form the client sends), 0 for none or one past the end."""
    if header is None or not header.startswith("bytes=") or not header[6:].split("-")[0].isdigit():
        return 0
    start = int(header[6:].split("-")[0])
    return start if start < size else 0
