"""`gs://` end to end, on a local GCS emulator: the output lock's create-if-absent, two concurrent launches into
one output, the graph a remote runner runs on an external worker pool, and a Dataflow launch's template
replayed on that pool.

What runs: PyPI's `gcp-storage-emulator` (with the two GCS behaviours it lacks added, `tests/gcs_emulator.py`),
`gcsfs` and `apache-beam[gcp]` from a directory outside the test environment (`pip_site`), Beam's own job
server (`local_job_service_main`) and SDK worker pool (`worker_pool_main`) started in a directory of their own
with their own `HOME` and `TMPDIR`. Every process that touches `gs://` is a subprocess with the emulator's
environment; the test process itself never imports gcsfs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.conftest import background_service, free_port, pip_site
from tests.gcs_emulator import GCS_REQUIREMENTS, gcs_emulator, requests_logged
from tests.test_concurrent_launches import _exactly_one_commits, _job as _launch_job, _launch_two
from tests.test_portable_runner import _job, run_local_reference

pytestmark = pytest.mark.heavy

BUCKET = "easydata-test"
IMAGE = "us-central1-docker.pkg.dev/easydata-test/easydata/easydata:test"

# Run in a subprocess with the emulator's environment: prints what the test asserts on, as JSON.
DIGESTS = """
import hashlib, json, sys, fsspec
fs = fsspec.filesystem("gs", skip_instance_cache=True)
root = sys.argv[1]
print(json.dumps({p.split(root + "/", 1)[1]: hashlib.sha256(fs.cat(p)).hexdigest()
                  for p in fs.find(root) if "/part-" in p}))
"""

EXISTS = "import json, sys, fsspec; print(json.dumps(fsspec.filesystem('gs').exists(sys.argv[1])))"

EXCLUSIVE = """
import json, sys, fsspec
from easydata.run.lock import _create_exclusive
fs = fsspec.filesystem("gs", skip_instance_cache=True)
results = []
for content in (b"first", b"second"):
    try:
        _create_exclusive(fs, sys.argv[1], content)
        results.append("created")
    except FileExistsError:
        results.append("exists")
print(json.dumps({"results": results, "content": fs.cat(sys.argv[1]).decode()}))
"""

# The launch replay: the Dataflow job a `--template_location` launch wrote (its pipeline proto, staged on the
# object store), run on Beam's job server with the SDK harness environment pointed at the external worker
# pool instead of the Docker image (the pool's Python has easydata installed, as the image does).
REPLAY = """
import json, sys, fsspec
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2, endpoints_pb2
from apache_beam.runners.portability.portable_runner import PortableRunner

template, job_endpoint, pool = sys.argv[1:4]
with fsspec.open(template, "rb") as f:
    description = json.load(f)
with fsspec.open(description["environment"]["sdkPipelineOptions"]["options"]["pipelineUrl"], "rb") as f:
    proto = beam_runner_api_pb2.Pipeline.FromString(f.read())
images = []
for environment in proto.components.environments.values():
    images.append(beam_runner_api_pb2.DockerPayload.FromString(environment.payload).container_image)
    environment.urn = common_urns.environments.EXTERNAL.urn
    environment.payload = beam_runner_api_pb2.ExternalPayload(
        endpoint=endpoints_pb2.ApiServiceDescriptor(url=pool)).SerializeToString()
    del environment.dependencies[:]  # the staged main session and pip list: the image's business
options = PipelineOptions([f"--job_endpoint={job_endpoint}", "--environment_type=EXTERNAL",
                           f"--environment_config={pool}"])
state = PortableRunner().run_portable_pipeline(proto, options).wait_until_finish()
print(json.dumps({"state": str(state), "images": images}))
"""


@pytest.fixture(scope="module")
def gcs_site() -> Path:
    return pip_site(*GCS_REQUIREMENTS)


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, mistral_tokenizer_dir) -> tuple[Path, dict[str, str]]:
    """The portable-runner job's inputs on local disk and the local runner's shards of it."""
    return run_local_reference(tmp_path_factory.mktemp("gcs-reference"), mistral_tokenizer_dir)


@pytest.fixture
def gcs(tmp_path: Path, gcs_site: Path) -> Iterator[dict[str, str]]:
    """The environment of a process that uses the emulated `gs://` (bucket `BUCKET`)."""
    with gcs_emulator(tmp_path, gcs_site, BUCKET) as env:
        yield {**os.environ, **env}


def _python(env: dict[str, str], code: str, *args: str, timeout: float = 600) -> Any:
    run = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _upload(env: dict[str, str], local: Path, remote: str) -> None:
    _python(env, "import sys, fsspec; fsspec.filesystem('gs', skip_instance_cache=True).put(sys.argv[1], sys.argv[2],"
                 " recursive=True); print('{}')", str(local), remote)


def test_a_lock_file_on_gcs_is_created_only_if_absent(gcs, tmp_path):
    """The output lock's atomic step: fsspec's `xb` through gcsfs sends `ifGenerationMatch=0`, and GCS's 412 for
    an existing object reaches the lock as FileExistsError (the first content stays)."""
    found = _python(gcs, EXCLUSIVE, f"{BUCKET}/out/.easydata-lock")
    assert found == {"results": ["created", "exists"], "content": "first"}
    uploads = [r for r in requests_logged(gcs) if r["op"] == "upload"]
    assert {(r["object"], r["ifGenerationMatch"]) for r in uploads} == {("out/.easydata-lock", "0")}
    assert [r["refused"] for r in uploads] == [False] * (len(uploads) - 1) + [True], uploads


def test_two_concurrent_launches_into_one_gcs_output_commit_once(gcs, tmp_path, tokenizer_dir):
    output = f"gs://{BUCKET}/run"
    runs = _launch_two(_launch_job(tmp_path, tokenizer_dir, output), gcs)
    _exactly_one_commits(runs)
    check = subprocess.run([sys.executable, "-m", "easydata", "validate", output], capture_output=True, text=True,
                           timeout=300, env=gcs)
    assert check.returncode == 0, check.stdout + check.stderr
    assert _python(gcs, EXISTS, f"{output}/.easydata-lock") is False
    locks = [r for r in requests_logged(gcs) if r["op"] == "upload" and r["object"] == "run/.easydata-lock"]
    assert locks and all(r["ifGenerationMatch"] == "0" for r in locks)


def test_an_output_in_a_gcs_bucket_that_does_not_exist_is_refused(gcs, tmp_path, tokenizer_dir):
    """gcsfs's `makedirs` creates a missing bucket, as s3fs's does: a mistyped output bucket is refused in one
    line, and none is made."""
    job = _launch_job(tmp_path, tokenizer_dir, f"gs://{BUCKET}-typo/run")
    run = subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--quiet"], capture_output=True,
                         text=True, timeout=600, env=gcs)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].startswith(f"easydata: error: output 'gs://{BUCKET}-typo/run': bucket"
                                                  f" '{BUCKET}-typo' does not exist")
    assert _python(gcs, EXISTS, f"{BUCKET}-typo") is False


def _worker_pool_env(root: Path, env: dict[str, str]) -> dict[str, str]:
    """The SDK workers' own directory, home and temp: they share nothing with the launcher but the store."""
    for folder in ("home", "tmp"):
        (root / "worker" / folder).mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(root / "worker" / "home"), "TMPDIR": str(root / "worker" / "tmp")}


def test_portable_runner_on_an_external_worker_pool_and_gcs_gives_the_local_bytes(local_reference, gcs, tmp_path,
                                                                                  mistral_tokenizer_dir):
    root, reference = local_reference
    _upload(gcs, root / "in", f"{BUCKET}/in")
    job_port, pool_port = free_port(), free_port()
    with background_service(["apache_beam.runners.portability.local_job_service_main", "--port", str(job_port)],
                            tmp_path / "job-server", gcs, job_port, "Beam job server"), \
            background_service(["apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port)],
                               tmp_path / "worker", _worker_pool_env(tmp_path, gcs), pool_port, "SDK worker pool"):
        config = tmp_path / "portable.json"
        config.write_text(json.dumps(_job(f"gs://{BUCKET}/in", f"gs://{BUCKET}/out", mistral_tokenizer_dir)))
        run = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet",
                              "--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
                              "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"],
                             capture_output=True, text=True, timeout=900, env=gcs, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
    assert _python(gcs, DIGESTS, f"{BUCKET}/out") == reference != {}
    assert list((tmp_path / "worker" / "tmp").glob("easydata-tokenizer-*")), "the tokenizer came through the staging"


def test_a_dataflow_launch_replayed_on_the_worker_pool_gives_the_local_bytes(local_reference, gcs, tmp_path,
                                                                             mistral_tokenizer_dir):
    """The Flex Template entry with `--runner=DataflowRunner --template_location=gs://...` (what Dataflow's
    launcher runs, here writing the job instead of submitting it: no Dataflow service is contacted); then the
    pipeline it staged, unpickled on isolated workers, commits the local runner's bytes and frees the lock."""
    root, reference = local_reference
    _upload(gcs, root / "in", f"{BUCKET}/in")
    config = tmp_path / "dataflow.json"
    config.write_text(json.dumps(_job(f"gs://{BUCKET}/in", f"gs://{BUCKET}/out", mistral_tokenizer_dir)))
    template = f"gs://{BUCKET}/templates/job.json"
    began = time.monotonic()
    launch = subprocess.run(
        [sys.executable, "-m", "beam_pipelines.flex_template", f"--config={config}", "--runner=DataflowRunner",
         "--project=easydata-test", "--region=us-central1", f"--temp_location=gs://{BUCKET}/temp",
         f"--staging_location=gs://{BUCKET}/staging", f"--template_location={template}",
         f"--sdk_container_image={IMAGE}"],
        capture_output=True, text=True, timeout=600, env=gcs, cwd=tmp_path)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "job submitted" in launch.stderr
    launched = time.monotonic() - began
    # The launch took the output's lock for the job (a detached one: the launcher has exited).
    lock = _python(gcs, "import json, sys, fsspec; print(fsspec.filesystem('gs').cat(sys.argv[1]).decode())",
                   f"{BUCKET}/out/.easydata-lock")
    assert lock["detached"] is True
    job_port, pool_port = free_port(), free_port()
    with background_service(["apache_beam.runners.portability.local_job_service_main", "--port", str(job_port)],
                            tmp_path / "job-server", gcs, job_port, "Beam job server"), \
            background_service(["apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port)],
                               tmp_path / "worker", _worker_pool_env(tmp_path, gcs), pool_port, "SDK worker pool"):
        replayed = _python(gcs, REPLAY, template, f"localhost:{job_port}", f"localhost:{pool_port}", timeout=900)
    assert replayed == {"state": "DONE", "images": [IMAGE]}, launched
    assert _python(gcs, DIGESTS, f"{BUCKET}/out") == reference != {}
    assert _python(gcs, EXISTS, f"{BUCKET}/out/.easydata-lock") is False
