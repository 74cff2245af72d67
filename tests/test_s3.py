"""Remote storage end to end: inputs read from and outputs written to `s3://` on a real S3-compatible
server (moto's standalone server on 127.0.0.1), through a proxy that fails every few requests with
`503 SlowDown`, as S3 does under load. The installed CLI runs the whole job; `validate` and the reader
read the output back from S3.

Endpoint and credentials reach every component the way users configure them: `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` in the environment.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pytest

from tests.conftest import check_threads, free_port, make_texts, wait_for_port, write_jsonl

pytest.importorskip("s3fs")
pytest.importorskip("moto")
pytestmark = pytest.mark.slow

_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")


class _FlakyProxy(BaseHTTPRequestHandler):
    """Forwards requests to the S3 server; every `every`-th request gets `503 SlowDown` instead."""

    protocol_version = "HTTP/1.1"

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                chunk = self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    return b"".join(chunks)
                chunks.append(chunk)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._body()
        server = self.server
        with server.lock:
            server.requests += 1
            fail = server.requests % server.every == 0
            server.failures += fail
        if fail:
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(_SLOW_DOWN)))
            self.end_headers()
            self.wfile.write(_SLOW_DOWN)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "connection")}
        headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection("127.0.0.1", server.upstream_port, timeout=60)
        upstream.request(self.command, self.path, body=body, headers=headers)
        response = upstream.getresponse()
        payload = response.read()
        with server.lock:
            server.bytes_out += len(payload)
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                self.send_header(key, value)
        length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(payload))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        upstream.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def log_message(self, *args) -> None:  # quiet
        pass


@contextlib.contextmanager
def moto_server(directory: Path) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 (its log in `directory`); yields the environment pointing at it."""
    port = free_port()
    with open(directory / "moto.log", "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(port, server, "moto server", timeout=60)
            yield {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A moto S3 server behind a flaky proxy; yields the environment pointing at the proxy."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyProxy)
    proxy.daemon_threads = True
    proxy.lock, proxy.requests, proxy.failures, proxy.every, proxy.upstream_port = threading.Lock(), 0, 0, 7, port
    proxy.bytes_out = 0  # bytes of the store's answers passed on
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        wait_for_port(port, server, "moto server", timeout=60)
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.server_address[1]}"}
        yield {"env": env, "proxy": proxy}
    finally:
        proxy.shutdown()
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_s3_round_trip_survives_transient_errors(s3, tokenizer_dir, tmp_path, monkeypatch):
    for key, value in s3["env"].items():
        monkeypatch.setenv(key, value)
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("easydata-in")
    fs.mkdir("easydata-out")
    texts = make_texts(400, seed=12)
    local = write_jsonl(tmp_path / "web.jsonl", [{"text": t, "id": i} for i, t in enumerate(texts)])
    fs.put(str(local), "easydata-in/web/part-0.jsonl")
    fs.put(str(write_jsonl(tmp_path / "web2.jsonl", [{"text": "second file", "id": -1}])), "easydata-in/web/part-1.jsonl")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "seed": 2, "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "web", "data_files": "s3://easydata-in/web/*.jsonl", "additional_fields": ["id"]}],
        "pack": {"enabled": True, "seq_length": 64},
        "save": {"output_dir": "s3://easydata-out/run", "num_shards": 3, "row_group_size": 16},
    }))
    failures_before = s3["proxy"].failures
    env = {**os.environ, **s3["env"]}
    run = subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--quiet"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr
    assert s3["proxy"].failures > failures_before  # requests really failed and were retried
    manifest = json.loads(fs.cat("easydata-out/run/manifest.json"))
    assert manifest["documents_in"] == 401 and manifest["documents_rejected"] == 0
    assert sorted(fs.ls("easydata-out/run/web")) == sorted(f"easydata-out/run/{s['path']}"
                                                           for s in manifest["datasets"]["web"]["shards"])
    assert not [p for p in fs.ls("easydata-out/run") if ".easydata-tmp-" in p]  # staging cleaned up
    check = subprocess.run([sys.executable, "-m", "easydata", "validate", "s3://easydata-out/run"],
                           capture_output=True, text=True, timeout=300, env=env)
    assert check.returncode == 0, check.stderr

    from easydata.reader import TokenReader

    reader = TokenReader("s3://easydata-out/run", batch_size=8, shuffle=True, seed=1, num_epochs=1,
                         drop_remainder=False, prefetch=0)
    rows = np.concatenate([b["input_ids"] for b in reader])
    assert rows.shape == (manifest["totals"]["rows"], 64)
    assert int((np.concatenate([b["segment_ids"] for b in TokenReader(
        "s3://easydata-out/run", batch_size=8, num_epochs=1, drop_remainder=False, prefetch=0)]) > 0).sum()) \
        == manifest["totals"]["tokens"]


def test_a_glob_over_a_versioned_bucket_runs(s3, tokenizer_dir, tmp_path, monkeypatch):
    """In a versioned bucket an object's listing has no `VersionId` and a look at it (HEAD) has one: planning
    took the version from the glob's cached listing and each worker from a HEAD, so every run over a glob
    stopped with "input ... changed during the run". A version is what both give (size, ETag, time), and an
    overwrite with other bytes still changes it."""
    import boto3
    import fsspec

    for key, value in s3["env"].items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="easydata-versioned")
    client.put_bucket_versioning(Bucket="easydata-versioned", VersioningConfiguration={"Status": "Enabled"})
    texts = make_texts(60, seed=5)
    for part in range(3):
        body = "".join(json.dumps({"text": t}) + "\n" for t in texts[part::3]).encode()
        client.put_object(Bucket="easydata-versioned", Key=f"in/part-{part}.jsonl", Body=body)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "seed": 2, "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "web", "data_files": "s3://easydata-versioned/in/*.jsonl"}],
        "save": {"output_dir": "s3://easydata-versioned/out", "num_shards": 2},
    }))
    run = subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--quiet"], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **s3["env"]})
    assert run.returncode == 0, run.stderr
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    assert json.loads(fs.cat("easydata-versioned/out/manifest.json"))["documents_in"] == 60

    from easydata.config import DatasetConfig
    from easydata.io.filesystems import file_facts
    from easydata.io.sources import plan_input

    planned = {s.path: s.version for s in plan_input(DatasetConfig(
        name="web", data_files="s3://easydata-versioned/in/*.jsonl")).splits}
    fsspec.filesystem("s3").invalidate_cache()  # a worker's look: no listing cached
    assert {path: file_facts(path)[1] for path in planned} == planned
    client.put_object(Bucket="easydata-versioned", Key="in/part-1.jsonl", Body=b'{"text": "other bytes"}\n')
    fsspec.filesystem("s3").invalidate_cache()
    assert file_facts("s3://easydata-versioned/in/part-1.jsonl")[1] != planned["s3://easydata-versioned/in/part-1.jsonl"]


def test_reading_a_small_object_takes_three_requests(s3, monkeypatch):
    """A worker reading whole small objects (`sample_by: document`) makes three requests for each: the open's
    HEAD, the GET and one HEAD after, that checks it is still what planning found (there was a HEAD before
    too: four round trips, which dominate many small objects)."""
    import boto3
    import fsspec

    from easydata.config import DatasetConfig
    from easydata.io.sources import plan_input, read_splits, work_units

    for key, value in s3["env"].items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="easydata-small")
    for i in range(20):
        client.put_object(Bucket="easydata-small", Key=f"in/{i:02d}.txt", Body=f"document {i}\n".encode() * 10)
    dataset = DatasetConfig(name="d", data_files="s3://easydata-small/in/*.txt", type="txt", sample_by="document")
    plan = plan_input(dataset)
    fsspec.filesystem("s3").invalidate_cache()  # a worker: no listing cached
    proxy = s3["proxy"]
    monkeypatch.setattr(proxy, "every", 10**9)  # no injected failures (their retries would count)
    before = proxy.requests
    texts = [t for unit in work_units(dataset, plan.splits, plan.split_bytes)
             for batch in read_splits(unit, dataset) for t in batch.texts]
    assert texts == [f"document {i}\n" * 10 for i in range(20)]
    assert proxy.requests - before == 3 * 20


def test_the_commit_checks_objects_many_at_once(s3, monkeypatch):
    """Inputs on S3 (an asynchronous fsspec file system) are checked `CHECK_THREADS` requests at a time at the
    commit (one after another they were 100,000 round trips for 100,000 objects); a changed one is named."""
    import boto3

    import easydata.io.sources as sources
    from easydata.errors import InputError
    from easydata.io.filesystems import file_version

    for key, value in s3["env"].items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="easydata-many")
    paths = []
    for i in range(40):
        client.put_object(Bucket="easydata-many", Key=f"in/{i:02d}.txt", Body=b"x" * 10)
        paths.append(f"s3://easydata-many/in/{i:02d}.txt")
    versions = {p: file_version(p) for p in paths}
    threads = check_threads(monkeypatch)
    sources.check_all_unchanged(versions)
    assert set(threads) == set(paths)
    assert len(set(threads.values())) > 1 and all(name.startswith("easydata-check") for name in threads.values())
    client.put_object(Bucket="easydata-many", Key="in/17.txt", Body=b"other")
    import fsspec

    fsspec.filesystem("s3").invalidate_cache()
    with pytest.raises(InputError, match="easydata-many/in/17.txt' changed during the run"):
        sources.check_all_unchanged(versions)


def test_a_missing_bucket_is_refused_and_a_client_failure_is_one_line(s3, tokenizer_dir, tmp_path, monkeypatch):
    """An output in a bucket that does not exist is refused before anything is written: s3fs's `makedirs`
    created it, so a mistyped bucket became a new bucket in the account. A store the client cannot use (no
    credentials, an AWS profile that does not exist, an endpoint that does not answer) is one line for `run`,
    `inspect` and `validate`: each was a botocore traceback."""
    import boto3

    for key, value in s3["env"].items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="easydata-typos")
    client.put_object(Bucket="easydata-typos", Key="in/a.jsonl",
                      Body="".join(json.dumps({"text": t}) + "\n" for t in make_texts(20, seed=3)).encode())
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"seed": 1, "default_tokenizer": str(tokenizer_dir),
                               "datasets": [{"name": "web", "data_files": "s3://easydata-typos/in/*.jsonl"}],
                               "save": {"output_dir": "s3://easydata-typoes/out"}}))
    env = {**os.environ, **s3["env"], "HOME": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}

    def easydata(*args: str, **changes: Optional[str]) -> subprocess.CompletedProcess:
        run_env = {k: v for k, v in {**env, **changes}.items() if v is not None}
        return subprocess.run([sys.executable, "-m", "easydata", *args], capture_output=True, text=True,
                              timeout=600, env=run_env)

    typo = easydata("run", str(job), "--quiet")
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == ["easydata: error: output 's3://easydata-typoes/out': bucket 'easydata-typoes'"
                                        " does not exist, or these credentials cannot see it; easydata creates no"
                                        " bucket: create it (or fix the name) and run again"]
    assert "easydata-typoes" not in {b["Name"] for b in client.list_buckets()["Buckets"]}

    fine = easydata("run", str(job), "--quiet", "--output", "s3://easydata-typos/out")
    assert fine.returncode == 0, fine.stderr
    no_credentials = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}
    cases = [(("run", str(job), "--quiet", "--output", "s3://easydata-typos/out2"), no_credentials,
              "NoCredentialsError: Unable to locate credentials"),
             (("inspect", "s3://easydata-typos/out"), no_credentials, "NoCredentialsError"),
             (("validate", "s3://easydata-typos/out"), {"AWS_PROFILE": "nosuch"},
              "ProfileNotFound: The config profile (nosuch) could not be found"),
             (("inspect", "s3://easydata-typos/out"), {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"},
              "EndpointConnectionError: Could not connect to the endpoint URL")]
    for args, changes, words in cases:
        failed = easydata(*args, **changes)
        assert failed.returncode == 2, (args, failed.stderr)
        assert len(failed.stderr.splitlines()) == 1 and words in failed.stderr, (args, failed.stderr)
        assert "Remote storage" in failed.stderr and "Traceback" not in failed.stderr

    # Anonymous requests (fsspec's FSSPEC_S3_ANON, for public buckets) to this private bucket: moto lists and
    # takes new objects but refuses to show one. A worker's look at an input (403, a PermissionError with no
    # errno) was a wall of tracebacks; the lock this run wrote and could not read back was "locked by
    # '.easydata-lock', which cannot be read".
    anonymous = {**no_credentials, "FSSPEC_S3_ANON": "true"}
    local_output = str(tmp_path / "local-out")
    failed = easydata("run", str(job), "--quiet", "--output", local_output, **anonymous)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.splitlines()[0].startswith("easydata: error: permission denied (Forbidden) at"
                                                    " 's3://easydata-typos/in/a.jsonl'"), failed.stderr
    failed = easydata("run", str(job), "--quiet", "--output", "s3://easydata-typos/anonymous", **anonymous)
    assert failed.returncode == 2 and failed.stderr.splitlines() == [
        "easydata: error: output 's3://easydata-typos/anonymous': the lock this run wrote cannot be read back"
        " (credentials that may write there but not read, or another run writing it at once); a run reads its"
        " output as it writes it"]


def test_an_object_cut_into_splits_is_downloaded_once_and_a_bin_output_read_in_windows(s3, tokenizer_dir, tmp_path,
                                                                                       monkeypatch):
    """fsspec's `cat_file(path, start, end)` is `cat_file(path, version_id, start)` on s3fs: the look at a file's
    first bytes that each later split of a text file makes (a UTF-16 file is refused by every split) downloaded
    the whole object from its 64th byte, and looked at the wrong bytes; `WindowReader` over a `bin` output on S3
    failed ("Invalid type for parameter VersionId"). And each split or unit of a file read ahead by the store's
    default block (s3fs: 50 MB), so every one of them read on to the end of a smaller object."""
    import boto3
    import fsspec

    from easydata.config import DatasetConfig
    from easydata.io.filesystems import file_head
    from easydata.io.sources import plan_input, read_splits, work_units
    from easydata.reader import WindowReader

    for key, value in s3["env"].items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="easydata-ranges")
    body = "".join(json.dumps({"text": t}) + "\n" for t in make_texts(6000, seed=8, min_words=100, max_words=200))
    client.put_object(Bucket="easydata-ranges", Key="in/big.jsonl", Body=body.encode())
    assert file_head("s3://easydata-ranges/in/big.jsonl", 9) == body.encode()[:9]

    dataset = DatasetConfig(name="d", data_files="s3://easydata-ranges/in/big.jsonl", type="jsonl")
    plan = plan_input(dataset)
    units = work_units(dataset, plan.splits, plan.split_bytes)
    assert len(units) >= 2
    fsspec.filesystem("s3").invalidate_cache()
    proxy = s3["proxy"]
    monkeypatch.setattr(proxy, "every", 10**9)  # no injected failures (their retries would count)
    before = proxy.bytes_out
    texts = [t for unit in units for batch in read_splits(unit, dataset) for t in batch.texts]
    assert len(texts) == 6000
    assert proxy.bytes_out - before < 1.25 * len(body.encode())  # each split its own range, read once

    # A Parquet object's units: pyarrow reads the footer and whole column chunks, each now one ranged request for
    # what it asks; with s3fs's 50 MB read-ahead every unit read on to the end of the object.
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = io.BytesIO()
    pq.write_table(pa.table({"text": [json.loads(line)["text"] for line in body.splitlines()]}), table,
                   row_group_size=200, compression="none")
    client.put_object(Bucket="easydata-ranges", Key="in/big.parquet", Body=table.getvalue())
    parquet = DatasetConfig(name="p", data_files="s3://easydata-ranges/in/big.parquet", type="parquet")
    plan = plan_input(parquet)
    units = work_units(parquet, plan.splits, plan.split_bytes)
    assert len(units) >= 2
    fsspec.filesystem("s3").invalidate_cache()
    before = proxy.bytes_out
    assert sum(len(batch.texts) for unit in units for batch in read_splits(unit, parquet)) == 6000
    assert proxy.bytes_out - before < 1.25 * len(table.getvalue())

    job = tmp_path / "job.json"
    job.write_text(json.dumps({"seed": 1, "default_tokenizer": str(tokenizer_dir),
                               "datasets": [{"name": "web", "data_files": "s3://easydata-ranges/in/big.jsonl"}],
                               "save": {"format": "bin", "output_dir": "s3://easydata-ranges/out"}}))
    env = {**os.environ, **s3["env"]}
    for output in ("s3://easydata-ranges/out", str(tmp_path / "out")):
        run = subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--quiet", "--output", output],
                             capture_output=True, text=True, timeout=600, env=env)
        assert run.returncode == 0, run.stderr
    remote, local = (WindowReader(out, seq_length=64, batch_size=4, seed=3)
                     for out in ("s3://easydata-ranges/out", str(tmp_path / "out")))
    for _, a, b in zip(range(5), remote, local):
        assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
