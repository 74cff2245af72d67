"""Launch checks for runners whose workers are elsewhere, and streaming on runners that cannot read Pub/Sub.

Before: `easydata run --runner=DataflowRunner` with local inputs or a local output submitted a job that
failed on its workers (a local input as "changed during the run (... -> absent)"), and `--streaming` on
`PortableRunner` reported DONE after seconds, wrote nothing and left the messages unacknowledged.
"""

from __future__ import annotations

import json

import pytest

from easydata.cli import main
from easydata.config import PipelineConfig
from easydata.errors import ConfigError
from easydata.run.run_plan import check_reachable_by_workers

DATAFLOW = ["--runner=DataflowRunner", "--project=my-project", "--region=us-central1",
            "--temp_location=gs://my-bucket/tmp"]


def _config(tmp_path, tokenizer_dir, data_files, output) -> str:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": output},
                                "datasets": [{"name": "web", "data_files": data_files}]}))
    return str(path)


def test_a_remote_runner_with_local_inputs_or_output_is_refused_before_any_work(tmp_path, tokenizer_dir, capsys):
    (tmp_path / "web.jsonl").write_text('{"text": "hello"}\n')
    config = _config(tmp_path, tokenizer_dir, str(tmp_path / "web.jsonl"), "gs://my-bucket/out")
    assert main(["run", config, *DATAFLOW]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"easydata: error: invalid config: dataset 'web': data_files '{tmp_path / 'web.jsonl'}' is on this machine, which"
                   " the workers of --runner=DataflowRunner cannot read: put it on a store they reach (gs://, s3://,"
                   " hf://)"), err
    config = _config(tmp_path, tokenizer_dir, "gs://my-bucket/web/*.jsonl", str(tmp_path / "out"))
    assert main(["run", config, *DATAFLOW]) == 2
    assert f"save.output_dir '{tmp_path / 'out'}' is on this machine" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_reachability_rule():
    def config(files, output):
        return PipelineConfig.from_dict({"default_tokenizer": "t", "save": {"output_dir": output},
                                         "datasets": [{"name": "d", "data_files": files, "type": "jsonl"}]})

    check_reachable_by_workers(config(["gs://b/a.jsonl", "s3://b/c.jsonl", "hf://datasets/x/y/z.jsonl"], "gs://b/o"),
                               "DataflowRunner")
    for files, output in ((["/data/a.jsonl"], "gs://b/o"), (["file:///data/a.jsonl"], "gs://b/o"),
                          (["memory://a.jsonl"], "gs://b/o"), (["gs://b/a.jsonl"], "memory://o"),
                          (["gs://b/a.jsonl"], "out")):
        with pytest.raises(ConfigError, match="is on this machine, which the workers of --runner=PortableRunner"):
            check_reachable_by_workers(config(files, output), "PortableRunner")


@pytest.mark.parametrize("runner", ["PortableRunner", "FlinkRunner", "PrismRunner"])
def test_streaming_refuses_runners_that_cannot_read_pubsub(runner, tmp_path, tokenizer_dir, capsys):
    path = tmp_path / "stream.json"
    path.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": str(tmp_path / "out")},
                                "datasets": [{"name": "live",
                                              "pubsub_subscription": "projects/my-project/subscriptions/docs"}]}))
    assert main(["run", str(path), "--streaming", f"--runner={runner}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"easydata: error: --streaming reads Pub/Sub, which Beam's Python SDK reads only on DataflowRunner and locally"
        f" (DirectRunner); --runner={runner} cannot: run the stream on one of those")
    assert not (tmp_path / "out").exists()


def test_a_memory_output_is_refused_for_local_worker_processes(tmp_path, tokenizer_dir, capsys):
    """Before: a run with `--output memory://...` and two workers failed deep in the job (the workers exchange
    rows through the output's staging, which is in the launching process's memory)."""
    (tmp_path / "web.jsonl").write_text('{"text": "hello"}\n')
    config = _config(tmp_path, tokenizer_dir, str(tmp_path / "web.jsonl"), "memory://easydata-test/out")
    assert main(["run", config, "--quiet", "--direct_num_workers=2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "easydata: error: invalid config: save.output_dir 'memory://easydata-test/out' is in this process's memory,"
        " which the local runner's 2 worker processes cannot share: run with --direct_num_workers=1, or use a path"
        " or store they share")
    assert main(["run", config, "--quiet", "--direct_num_workers=1"]) == 0  # in-process: it works
