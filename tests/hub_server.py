"""A local HTTP server that answers `huggingface_hub`'s downloads as the Hub does, for the online paths of tests
(the tests themselves never touch the network): model repos held in memory, each file at
`/{repo}/resolve/{revision}/{path}` (HEAD with `X-Repo-Commit`, `ETag` and `Content-Length`, then GET) and
folders at `/api/models/{repo}/tree/{revision}/{path}`; a missing file or folder is a 404 with
`X-Error-Code: EntryNotFound`, as the Hub answers. `requests` lists the paths asked for.

Example:
    with HubServer({"acme/tok": {"tokenizer.json": b"..."}}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    """Serves `repos` (`{"owner/name": {"path/in/repo": bytes}}`) on 127.0.0.1 until closed."""

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos, self.requests = repos, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _missing(self) -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, body: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                server.requests.append(f"{self.command} {path}")
                if path.startswith("/api/models/"):
                    repo, _, rest = path[len("/api/models/"):].partition("/tree/")
                    folder = rest.partition("/")[2].strip("/")
                    files = server.repos.get(repo, {})
                    listed = [{"type": "file", "path": name, "oid": hashlib.sha1(data).hexdigest(), "size": len(data)}
                              for name, data in sorted(files.items()) if name.rpartition("/")[0] == folder]
                    if not listed:
                        return self._missing()
                    data = json.dumps(listed).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                else:
                    repo, _, rest = path.lstrip("/").partition("/resolve/")
                    name = rest.partition("/")[2]
                    data = server.repos.get(repo, {}).get(name)
                    if data is None:
                        return self._missing()
                    self.send_response(200)
                    self.send_header("X-Repo-Commit", COMMIT)
                    self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                self._answer(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> "HubServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
