"""Inputs read over HTTP as people give them: a URL that carries its credentials (a login, a presigned link's
signature) and a server that does not say a file's size. A real HTTP server on 127.0.0.1 serves real files;
the installed command runs the job."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from easydata.config import REDACTED, redact_url, redact_urls
from tests.conftest import make_texts

SECRET = "s3cretSECRET"


@pytest.mark.parametrize("url, shown", [
    ("https://me:pw@host/d.jsonl", f"https://{REDACTED}@host/d.jsonl"),
    ("https://ghp_TOKEN@github.com/o/r/raw/d.jsonl", f"https://{REDACTED}@github.com/o/r/raw/d.jsonl"),
    ("https://b.s3.amazonaws.com/k.jsonl?X-Amz-Credential=AKIA&X-Amz-Signature=ab12",
     f"https://b.s3.amazonaws.com/k.jsonl?X-Amz-Credential={REDACTED}&X-Amz-Signature={REDACTED}"),
    ("https://a.blob.core.windows.net/c/d.jsonl?sv=2024&sig=xyz%3D", f"https://a.blob.core.windows.net/c/d.jsonl?sv={REDACTED}&sig={REDACTED}"),
    ("http://u:p@host:8080/a?token=t#frag", f"http://{REDACTED}@host:8080/a?token={REDACTED}#frag"),
    # nothing to hide: unchanged, whatever it is
    ("s3://bucket/data/*.jsonl", "s3://bucket/data/*.jsonl"),
    ("/data/me@work/file?.jsonl", "/data/me@work/file?.jsonl"),
    ("hf://datasets/org/name@main/data/*.parquet", "hf://datasets/org/name@main/data/*.parquet"),
    ("http://[::1/x?y=1", "http://[::1/x?y=1"),
    ("{% set a = 1 %}See https://x.org/?q=1 or ask me@x.org? {{ a }}",
     "{% set a = 1 %}See https://x.org/?q=1 or ask me@x.org? {{ a }}"),  # a template that holds one: not a URL
])
def test_a_urls_login_and_query_values_are_redacted(url, shown):
    assert redact_url(url) == shown


def test_every_url_in_a_message_is_redacted():
    message = (f"cannot list 'https://me:{SECRET}@host/a.jsonl?sig={SECRET}': 403, url='http://x/?k={SECRET}'"
               " (is 'a?b' a pattern?)")
    assert redact_urls(message) == (f"cannot list 'https://{REDACTED}@host/a.jsonl?sig={REDACTED}': 403,"
                                    f" url='http://x/?k={REDACTED}' (is 'a?b' a pattern?)")


class _Files(BaseHTTPRequestHandler):
    """Serves `server.files` (name -> bytes) with their size, or without it (`server.sized` False: a
    chunked stream, as a server that makes the file while it sends it does)."""

    protocol_version = "HTTP/1.1"

    def _head(self) -> bytes | None:
        data = self.server.files.get(self.path.split("?")[0].lstrip("/"))
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self.send_response(200)
        if self.server.sized:
            self.send_header("Content-Length", str(len(data)))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        return data

    def do_HEAD(self) -> None:
        self._head()

    def do_GET(self) -> None:
        data = self._head()
        if data is None:
            return
        if self.server.sized:
            self.wfile.write(data)
        else:
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

    def log_message(self, *args) -> None:  # quiet
        pass


@contextlib.contextmanager
def _serve(files: dict[str, bytes], sized: bool = True) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    server.daemon_threads, server.files, server.sized = True, files, sized
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def _run(tmp_path: Path, tokenizer_dir: Path, data_files: str, out: Path) -> subprocess.CompletedProcess:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"seed": 1, "default_tokenizer": str(tokenizer_dir),
                               "datasets": [{"name": "web", "data_files": data_files, "type": "jsonl"}],
                               "save": {"output_dir": str(out), "overwrite": True}}))
    return subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--quiet"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_credentials_in_an_input_url_never_reach_the_output_or_the_error_lines(tmp_path, tokenizer_dir):
    """A login (`https://user:password@...`) and a presigned link's query were written into the manifest's
    config and into every dead letter's `source`: both are published with the shards (`push_to_hub`)."""
    body = "".join(json.dumps({"text": t}) + "\n" for t in make_texts(30, seed=4)) + "{not json\n"
    out = tmp_path / "out"
    with _serve({"d.jsonl": body.encode()}) as port:
        done = _run(tmp_path, tokenizer_dir, f"http://alice:{SECRET}@127.0.0.1:{port}/d.jsonl?sig={SECRET}", out)
        assert done.returncode == 0, done.stderr
        missing = _run(tmp_path, tokenizer_dir, f"http://alice:{SECRET}@127.0.0.1:{port}/gone.jsonl", tmp_path / "o2")
    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert not [p for p, data in written.items() if SECRET.encode() in data]
    manifest = json.loads((out / "manifest.json").read_text())
    shown = f"http://{REDACTED}@127.0.0.1:{port}/d.jsonl?sig={REDACTED}"
    assert manifest["config"]["datasets"][0]["data_files"] == shown
    assert manifest["documents_written"] == 30 and manifest["documents_rejected"] == 1  # the data itself was read
    [letter] = [json.loads(line) for p in (out / "rejected").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert letter["source"] == shown and letter["excerpt"] == "{not json"
    assert missing.returncode == 2 and SECRET not in missing.stdout + missing.stderr
    assert missing.stderr.splitlines() == [f"easydata: error: data file 'http://{REDACTED}@127.0.0.1:{port}"
                                           "/gone.jsonl' does not exist"]


@pytest.mark.slow
def test_an_http_input_of_unknown_size_is_one_line(tmp_path, tokenizer_dir):
    """A server that sends no Content-Length (a chunked stream): fsspec gives its size as None, which ended the
    run, and its dry run, in `TypeError: int() argument must be ... not 'NoneType'`."""
    body = "".join(json.dumps({"text": t}) + "\n" for t in make_texts(30, seed=5)).encode()
    with _serve({"d.jsonl": body}, sized=False) as port:
        done = _run(tmp_path, tokenizer_dir, f"http://127.0.0.1:{port}/d.jsonl", tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"easydata: error: 'http://127.0.0.1:{port}/d.jsonl' has no known size: its"
                                        " server does not say it (no Content-Length), and planning cuts an input by"
                                        " its size; download it and give the local copy"]
