"""Streaming end to end against the real Pub/Sub emulator: publish documents, run
`easydata run CONFIG --streaming` in a subprocess, wait for the committed windows, stop it with
SIGTERM, and check every published document's tokens are in the output exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from tests.conftest import free_port, make_texts, wait_for_port

pubsub_v1 = pytest.importorskip("google.cloud.pubsub_v1", reason="google-cloud-pubsub is not installed")
pytestmark = pytest.mark.heavy

LAUNCHER = Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator")
PROJECT = "easydata-test"


def _launcher() -> Path | None:
    if LAUNCHER.exists():
        return LAUNCHER
    try:  # wherever the Debian package put it
        listing = subprocess.run(["dpkg", "-L", "google-cloud-cli-pubsub-emulator"], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    found = [Path(p) for p in listing.stdout.split() if p.endswith("/bin/cloud-pubsub-emulator")]
    return found[0] if found else None


def _java_pids(port: int) -> list[int]:
    """Java processes serving `port` (the launcher may leave java in a session of its own)."""
    out = subprocess.run(["pgrep", "-f", f"--port={port}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    launcher = _launcher()
    if launcher is None or shutil.which("java") is None:
        pytest.skip("the Pub/Sub emulator (Debian package google-cloud-cli-pubsub-emulator) or java is missing")
    port = free_port()
    log = open(tmp_path_factory.mktemp("emulator") / "emulator.log", "wb")
    proc = subprocess.Popen([str(launcher), "--host=127.0.0.1", f"--port={port}"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc, "the Pub/Sub emulator", timeout=90)
        yield f"127.0.0.1:{port}"
    finally:
        for pid in {proc.pid, *_java_pids(port)}:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)
        log.close()


def _publish(publisher, topic: str, messages: list[bytes]) -> None:
    for future in [publisher.publish(topic, data, origin="emulator") for data in messages]:
        future.result(timeout=60)


def test_published_documents_are_committed_exactly_once(emulator, tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, "docs")
    subscription = subscriber.subscription_path(PROJECT, "docs-sub")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    out = tmp_path / "out"
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "live", "pubsub_subscription": subscription, "additional_fields": ["origin"]}],
        "streaming": {"window_seconds": 2},
        "save": {"output_dir": str(out)},
    }))
    env = {**os.environ, "PUBSUB_EMULATOR_HOST": emulator}
    texts = make_texts(60, seed=21)
    # A backlog: half the messages wait in the subscription before the job starts (their publish times
    # are behind the local runner's wall-clock watermark: nothing may be dropped as late), half arrive
    # while it runs.
    _publish(publisher, topic, [json.dumps({"text": t}).encode() for t in texts[:30]] + [b"{not json"])
    proc = subprocess.Popen([sys.executable, "-m", "easydata", "run", str(job), "--streaming"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(5)
        _publish(publisher, topic, [json.dumps({"text": t}).encode() for t in texts[30:]])
        deadline = time.monotonic() + 300  # generous: the local runner pulls in 30 s long polls
        manifest = {}
        while time.monotonic() < deadline:
            if (out / "manifest.json").exists():
                manifest = json.loads((out / "manifest.json").read_text())
                if manifest["documents_in"] >= 61:
                    break
            if proc.poll() is not None:
                pytest.fail(f"the streaming job ended: {proc.stderr.read()}")
            time.sleep(0.5)
        assert manifest.get("documents_in") == 61, manifest.get("windows")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):  # a scheduler's second signal, while the job is cancelled
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
    assert "cancelling the streaming job; committed windows are kept" in err
    assert proc.returncode == 0 and "Traceback" not in err and "interrupted" not in err, (proc.returncode, err[-2000:])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["streaming"] and manifest["documents_written"] == 60 and manifest["documents_rejected"] == 1
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    shards = manifest["datasets"]["live"]["shards"]
    rows = [r for s in shards for r in pq.read_table(out / s["path"]).to_pylist()]
    assert sorted(r["input_ids"] for r in rows) == sorted(tok.encode(t).ids + [eos] for t in texts)
    assert {r["origin"] for r in rows} == {"emulator"}  # attributes carried as fields
    assert sum(s["tokens"] for s in shards) == manifest["totals"]["tokens"]
    assert all(p.name.startswith("w") and " " not in p.name for p in (out / "live").iterdir())
    check = subprocess.run([sys.executable, "-m", "easydata", "validate", str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
