"""`benchmarks/stage_profile.py`: py-spy samples given to the pipeline stage that spent them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import stage_profile  # noqa: E402

WORKER = 'process 7:"python -m beam_pipelines.local.local_worker"'
BEAM = "process_bundle (apache_beam/runners/worker/bundle_processor.py:1)"


def test_a_sample_belongs_to_its_innermost_stage_and_shared_helpers_to_their_caller():
    tokenize = [WORKER, BEAM, "process (transforms/tokenize.py:120)", "encode (easydata/text/engines.py:87)",
                "encode_batch (gigatoken/_tokenizer.py:219)"]
    checkpoint = [WORKER, BEAM, "process (transforms/tokenize.py:120)", "write (easydata/run/checkpoint.py:40)",
                  "write_staged_batches (easydata/io/formats.py:461)"]
    staged_by_pack = [WORKER, BEAM, "process (transforms/pack.py:60)", "write_staged_batches (easydata/io/formats.py:461)"]
    shard = [WORKER, BEAM, "process (transforms/write.py:80)", "_emit (easydata/io/formats.py:288)",
             "write_table (pyarrow/parquet/core.py:1216)"]
    assert stage_profile.stage_of(tokenize) == "tokenize: encode"
    assert stage_profile.stage_of(checkpoint) == "checkpoints (resume)"
    assert stage_profile.stage_of(staged_by_pack) == "pack"
    assert stage_profile.stage_of(shard) == "write shards"
    assert stage_profile.stage_of([WORKER, BEAM]) == "Beam runner + gRPC"
    assert stage_profile.stage_of([WORKER, "<module> (easydata/cli.py:1)", "_find_and_load (<frozen>:1)"]) \
        == "start-up (imports)"


def test_waiting_threads_count_nowhere_and_seconds_follow_the_rate(tmp_path):
    raw = tmp_path / "profile.txt"
    raw.write_text(
        f"{WORKER};{BEAM};encode_batch (gigatoken/_tokenizer.py:219) 300\n"
        f"{WORKER};Thread.run (threading.py:982);Condition.wait (threading.py:320) 500\n"
        f"{WORKER};Thread.run (threading.py:982);_serve (grpc/_server.py:1314) 400\n"
        f"{WORKER};process (transforms/write.py:80);_emit (easydata/io/formats.py:288) 100\n")
    assert stage_profile.stage_seconds(raw) == {"tokenize: encode": 300 / stage_profile.RATE,
                                                 "write shards": 100 / stage_profile.RATE}
