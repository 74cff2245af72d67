"""The graph a remote runner runs, run here: Beam's job server, an external SDK worker pool and an object store.

Dataflow runs the job's graph on workers that share nothing with the launcher but the object store: the
rows go through Beam's GroupByKey (not the local runner's group files), the tokenizer arrives through the
run's staging, every path is a URL. Here the same graph runs on `PortableRunner` against Beam's own Python
job server (`local_job_service_main`) and an external worker pool (`worker_pool_main`) started in a
directory of its own with its own `HOME` and `TMPDIR`; inputs and output are on S3 (moto's server). The
shards must be byte-identical to the local runner's. Beam's own `DirectRunner` (the GroupByKey path on
this machine) is held to the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import background_service, free_port, make_texts

pytestmark = pytest.mark.slow


def _digest_local(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


def _job(data_root: str, output: str, tokenizer_dir: Path) -> dict:
    return {"seed": 2, "default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "web", "data_files": f"{data_root}/web/*.jsonl"},
                         {"name": "code", "data_files": f"{data_root}/code/*.jsonl"}],
            "mix": {"weights": {"web": 0.6, "code": 0.4}, "stop_strategy": "all_exhausted"},
            "pack": {"enabled": True, "seq_length": 64}, "save": {"output_dir": output, "num_shards": 2}}


def _write_inputs(root: Path) -> None:
    for name, n, seed in (("web", 400, 12), ("code", 150, 13)):
        (root / name).mkdir(parents=True, exist_ok=True)
        with open(root / name / "part-0.jsonl", "w", encoding="utf-8") as f:
            for text in make_texts(n, seed=seed):
                f.write(json.dumps({"text": text}) + "\n")


def run_local_reference(root: Path, tokenizer_dir: Path) -> tuple[Path, dict[str, str]]:
    """The job's inputs written under `root` and the local runner's shards of it: `(root, digests)`."""
    _write_inputs(root / "in")
    config = root / "local.json"
    config.write_text(json.dumps(_job(str(root / "in"), str(root / "local-out"), tokenizer_dir)))
    run = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet"], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return root, _digest_local(root / "local-out")


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, mistral_tokenizer_dir) -> tuple[Path, dict[str, str]]:
    """The job's inputs on local disk and the local runner's shards of it."""
    return run_local_reference(tmp_path_factory.mktemp("portable"), mistral_tokenizer_dir)


def test_portable_runner_on_an_external_worker_pool_and_s3_gives_the_local_bytes(local_reference,
                                                                                 mistral_tokenizer_dir):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    import fsspec

    from tests.test_s3 import moto_server

    root, reference = local_reference
    with moto_server(root) as s3_env:
        env = {**os.environ, **s3_env}
        fs = fsspec.filesystem("s3", skip_instance_cache=True, endpoint_url=s3_env["AWS_ENDPOINT_URL"],
                               key="testing", secret="testing")
        fs.mkdir("easydata-in")
        fs.mkdir("easydata-out")
        fs.put(str(root / "in"), "easydata-in/data", recursive=True)
        job_port, pool_port = free_port(), free_port()
        worker = root / "worker"  # the SDK workers' own directory, home and temp: nothing shared but S3
        worker_env = {**env, "HOME": str(worker / "home"), "TMPDIR": str(worker / "tmp")}
        for folder in ("home", "tmp"):
            (worker / folder).mkdir(parents=True, exist_ok=True)
        with background_service(["apache_beam.runners.portability.local_job_service_main", "--port", str(job_port)],
                      root / "job-server", env, job_port, "Beam job server"), \
                background_service(["apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port)],
                         worker, worker_env, pool_port, "SDK worker pool"):
            config = root / "portable.json"
            config.write_text(json.dumps(_job("s3://easydata-in/data", "s3://easydata-out/run", mistral_tokenizer_dir)))
            began = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet",
                                  "--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
                                  "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"],
                                 capture_output=True, text=True, timeout=900, env=env, cwd=root)
            assert run.returncode == 0, run.stderr[-3000:]
            seconds = time.monotonic() - began
        remote = {p.split("easydata-out/run/", 1)[1]: hashlib.sha256(fs.cat(p)).hexdigest()
                  for p in fs.find("easydata-out/run") if "/part-" in p}
        assert remote == reference != {}, seconds
        manifest = json.loads(fs.cat("easydata-out/run/manifest.json"))
        assert manifest["mix"]["sources"]["code"]["repeat_factor"] > 1
        # The workers had the tokenizer only through the run's staging on S3, and worked in their own temp.
        assert list((worker / "tmp").glob("easydata-tokenizer-*"))
        assert not [p for p in fs.ls("easydata-out/run") if ".easydata-tmp-" in p]


def test_beams_own_direct_runner_groups_by_key_to_the_local_bytes(local_reference, mistral_tokenizer_dir, tmp_path):
    """`apache_beam.runners.direct.DirectRunner` (what `TestPipeline` uses; offline it falls back from Prism
    to its in-process runner) with the graph's GroupByKey, as a remote runner gets it."""
    import apache_beam as beam
    from apache_beam.runners.direct.direct_runner import DirectRunner

    from beam_pipelines.batch import build_batch_pipeline
    from easydata.config import PipelineConfig
    from easydata.run.run_plan import prepare_run

    root, reference = local_reference
    config = PipelineConfig.from_dict(_job(str(root / "in"), str(tmp_path / "out"), mistral_tokenizer_dir))
    plan = prepare_run(config)
    with beam.Pipeline(runner=DirectRunner()) as pipeline:
        build_batch_pipeline(pipeline, config, plan, time.time(), group_via_files=False)
    assert _digest_local(tmp_path / "out") == reference
