"""A small Hugging Face Hub stand-in on 127.0.0.1, for tests that run the real `huggingface_hub` client (and through
it `push_to_hub`, `snapshot_download` and `from_pretrained`) without reaching the network.

It keeps model repositories in memory and answers the few HTTP endpoints the client calls for them, with the
payloads and headers that `huggingface_hub` reads (its `hf_api.py`, `_commit_api.py`, `file_download.py`):

| request | client call |
|---|---|
| `POST /api/repos/create` | `create_repo` (409 when the repository exists: `exist_ok=True` accepts it) |
| `POST /api/validate-yaml` | `upload_folder`/`push_to_hub` checking a model card's metadata |
| `POST /api/models/{repo}/preupload/{revision}` | every file is uploaded "regular": inline, base64, in the commit |
| `POST /api/models/{repo}/commit/{revision}` | `create_commit`: NDJSON lines `header`, `file`, `deletedFile` |
| `GET /api/models/{repo}[/revision/{revision}]` | `model_info`/`repo_info` (`snapshot_download` resolves the commit) |
| `GET /api/models/{repo}/tree/{revision}[/{folder}]` | `list_repo_tree` (`snapshot_download` lists the files) |
| `HEAD`/`GET /{repo}/resolve/{revision}/{file}` | `hf_hub_download`: `X-Repo-Commit`, `ETag`, `Content-Length` |

Every revision is a branch name (`main`) or a commit id; a commit id is the SHA-1 of the commit's content and its
parent. Missing repositories, revisions and files answer 404 with the `X-Error-Code` the client maps to
`RepositoryNotFoundError`, `RevisionNotFoundError` and `EntryNotFoundError`, so that `from_pretrained` treats an
optional file that is absent as absent. No LFS, no xet, no authentication (any token is accepted), no pagination:
what a test of a small model needs. `requests` lists every request (method and path) for the test to inspect.

    with HubStandIn() as hub:  # then HF_ENDPOINT=hub.url for the client, e.g. in a subprocess's environment
        ...
        hub.files("someone/model")  # {path: bytes} of the main branch
"""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import unquote, urlsplit

EMPTY_TREE = "0" * 40


def git_blob_id(data: bytes) -> str:
    """The git object id of a file's content, which the Hub gives as a regular file's ETag and tree `oid`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repository:
    """One model repository: its commits (id -> `{path: bytes}`) and the commit its `main` branch points to."""

    def __init__(self):
        self.commits = {EMPTY_TREE: {}}
        self.main = EMPTY_TREE

    def snapshot(self, revision: str) -> tuple[str, dict[str, bytes]] | None:
        """`(commit id, files)` of a branch name or commit id, `None` if there is no such revision."""
        commit = self.main if revision == "main" else revision
        return (commit, self.commits[commit]) if commit in self.commits else None

    def commit(self, lines: list[dict]) -> str:
        """Applies the NDJSON operations of a commit on top of `main` and returns the new commit id."""
        files = dict(self.commits[self.main])
        for line in lines:
            value = line["value"]
            if line["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] == "deletedFile":
                files.pop(value["path"])
            elif line["key"] != "header":
                raise ValueError(f"the stand-in does not implement commit operations {line['key']!r}")
        digest = hashlib.sha1(self.main.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + git_blob_id(files[path]).encode())
        self.main = digest.hexdigest()
        self.commits[self.main] = files
        return self.main


class HubStandIn:
    """The server: `url` (e.g. `http://127.0.0.1:40123`), `repositories` (repo id -> [`Repository`]), `requests`
    (`(method, path)` of every request). A context manager that serves from a daemon thread until it exits."""

    def __init__(self):
        self.repositories: dict[str, Repository] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Self:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """The files of a repository at a revision, `{path: content}`."""
        return self.repositories[repo_id].snapshot(revision)[1]


def _handler_for(hub: HubStandIn) -> type[BaseHTTPRequestHandler]:
    """The request handler class of `hub` (one instance per request, as `http.server` makes them)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

        def log_message(self, *args) -> None:  # the test output is no place for an access log
            pass

        def do_GET(self) -> None:
            self._route("GET")

        def do_HEAD(self) -> None:
            self._route("HEAD")

        def do_POST(self) -> None:
            self._route("POST")

        def _route(self, method: str) -> None:
            path = urlsplit(self.path).path
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with hub.lock:
                hub.requests.append((method, path))
                for pattern, methods, answer in ROUTES:
                    match = re.fullmatch(pattern, path)
                    if match and method in methods:
                        return answer(self, method, body, *(group and unquote(group) for group in match.groups()))
            self._send(404, {"error": f"the stand-in has no route for {method} {path}"})

        def _send(self, status: int, payload=None, headers: dict | None = None, data: bytes | None = None) -> None:
            """Answers with `payload` as JSON (or the raw `data`); a HEAD request gets the headers only."""
            if data is None:
                data = json.dumps(payload).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
            self.send_response(status)
            for name, value in {**(headers or {}), "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _not_found(self, code: str, message: str) -> None:
            self._send(404, {"error": message}, {"X-Error-Code": code})

        def _snapshot(self, repo_id: str, revision: str):
            """`(commit id, files)`, or `None` after answering 404 for a missing repository or revision."""
            if repo_id not in hub.repositories:
                return self._not_found("RepoNotFound", f"Repository {repo_id} not found")
            snapshot = hub.repositories[repo_id].snapshot(revision)
            if snapshot is None:
                self._not_found("RevisionNotFound", f"Revision {revision} not found in {repo_id}")
            return snapshot

        def create_repo(self, method, body) -> None:
            request = json.loads(body)
            repo_id = "/".join(filter(None, (request.get("organization"), request["name"])))
            answer = {"url": f"{hub.url}/{repo_id}", "name": repo_id}
            if repo_id in hub.repositories:
                return self._send(409, {"error": "You already created this model repo", **answer})
            hub.repositories[repo_id] = Repository()
            self._send(200, answer)

        def validate_yaml(self, method, body) -> None:
            self._send(200, {"errors": [], "warnings": []})

        def preupload(self, method, body, repo_id, revision) -> None:
            if self._snapshot(repo_id, revision) is not None:
                files = [{"path": file["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                         for file in json.loads(body)["files"]]  # fmt: skip
                self._send(200, {"files": files, "commitOid": hub.repositories[repo_id].main})

        def commit(self, method, body, repo_id, revision) -> None:
            if self._snapshot(repo_id, revision) is not None:
                commit = hub.repositories[repo_id].commit([json.loads(line) for line in body.splitlines() if line])
                url = f"{hub.url}/{repo_id}/commit/{commit}"
                self._send(200, {"commitUrl": url, "commitOid": commit, "pullRequestUrl": None})

        def model_info(self, method, body, repo_id, revision=None) -> None:
            snapshot = self._snapshot(repo_id, revision or "main")
            if snapshot is not None:
                commit, files = snapshot
                siblings = [{"rfilename": path, "size": len(data)} for path, data in sorted(files.items())]
                self._send(200, {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                                 "siblings": siblings, "tags": []})  # fmt: skip

        def tree(self, method, body, repo_id, revision, folder=None) -> None:
            snapshot = self._snapshot(repo_id, revision)
            if snapshot is not None:
                prefix = f"{folder.strip('/')}/" if folder else ""
                entries = [{"type": "file", "path": path, "size": len(data), "oid": git_blob_id(data)}
                           for path, data in sorted(snapshot[1].items()) if path.startswith(prefix)]  # fmt: skip
                self._send(200, entries)

        def resolve(self, method, body, repo_id, revision, filename) -> None:
            snapshot = self._snapshot(repo_id, revision)
            if snapshot is None:
                return
            commit, files = snapshot
            if filename not in files:
                return self._not_found("EntryNotFound", f"{filename} does not exist at {revision} of {repo_id}")
            data = files[filename]
            headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"'}
            self._send(200, headers=headers, data=data)

    repo = r"([\w.-]+/[\w.-]+)"
    ROUTES = [
        (r"/api/repos/create", {"POST"}, Handler.create_repo),
        (r"/api/validate-yaml", {"POST"}, Handler.validate_yaml),
        (rf"/api/models/{repo}/preupload/([^/]+)", {"POST"}, Handler.preupload),
        (rf"/api/models/{repo}/commit/([^/]+)", {"POST"}, Handler.commit),
        (rf"/api/models/{repo}(?:/revision/([^/]+))?", {"GET"}, Handler.model_info),
        (rf"/api/models/{repo}/tree/([^/]+)(/.*)?", {"GET"}, Handler.tree),
        (rf"/{repo}/resolve/([^/]+)/(.+)", {"GET", "HEAD"}, Handler.resolve),
    ]
    return Handler
