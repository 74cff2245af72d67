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


def test_the_hf_recheck_is_its_own_stage_though_it_calls_the_tokenizer_like_the_engine():
    engine = [WORKER, BEAM, "process (transforms/tokenize.py:120)", "VerifiedEngine.encode (easydata/text/engines.py:473)",
              "FastokensEngine.encode (easydata/text/engines.py:144)"]
    recheck = [WORKER, BEAM, "process (transforms/tokenize.py:120)", "VerifiedEngine.encode (easydata/text/engines.py:476)",
               "VerifiedEngine._recheck (easydata/text/engines.py:497)", "Engine.encode (easydata/text/engines.py:100)"]
    assert stage_profile.stage_of(engine) == "tokenize: encode"
    assert stage_profile.stage_of(recheck) == "tokenize: hf re-check"
    assert stage_profile.stage_of(recheck + ["Condition.wait (threading.py:320)"]) is None  # waiting stays idle
    from easydata.text.engines import VerifiedEngine  # the frame the profile looks for is the product's

    assert callable(getattr(VerifiedEngine, "_recheck", None))


def test_waiting_threads_count_nowhere_and_seconds_follow_the_rate(tmp_path):
    raw = tmp_path / "profile.txt"
    raw.write_text(
        f"{WORKER};{BEAM};encode_batch (gigatoken/_tokenizer.py:219) 300\n"
        f"{WORKER};Thread.run (threading.py:982);Condition.wait (threading.py:320) 500\n"
        f"{WORKER};Thread.run (threading.py:982);_serve (grpc/_server.py:1314) 400\n"
        f"{WORKER};process (transforms/write.py:80);_emit (easydata/io/formats.py:288) 100\n")
    assert stage_profile.stage_seconds(raw) == {"tokenize: encode": 300 / stage_profile.RATE,
                                                 "write shards": 100 / stage_profile.RATE}


def test_the_hf_recheck_py_spy_cannot_see_is_estimated_from_the_manifest_and_replaces_its_samples(capsys):
    engine = {"name": "fastokens", "while_running": {"documents": 44_494, "verified": 469, "mismatches": 0}}
    # 469 of 44,494 documents re-checked: that share of 264.6 M tokens at 0.48 M tokens/s in one process
    assert abs(stage_profile.hf_recheck_seconds([engine], 264_569_274, 479_473) - 5.816) < 0.01
    assert stage_profile.hf_recheck_seconds([{"name": "hf"}], 264_569_274, 479_473) == 0.0  # no re-check: hf ran

    seconds = {"write shards": 30.0, "tokenize: encode": 20.0, "tokenize: hf re-check": 10.0}  # sampled
    stage_profile.print_profile(seconds, 10**9, cpu_seconds=40.0, unseen={"tokenize: hf re-check": 8.0})
    rows = {line[:36].strip(): line.split() for line in capsys.readouterr().out.splitlines()[3:]}
    assert set(rows) == {"write shards", "tokenize: encode", "tokenize: hf re-check (estimated)"}
    # the 32 CPU s left after the estimate are shared by the sampled stages in their proportion
    assert rows["write shards"][-3:] == ["19.2", "19.2", "48.0%"]
    assert rows["tokenize: encode"][-3:] == ["12.8", "12.8", "32.0%"]
    assert rows["tokenize: hf re-check (estimated)"][-3:] == ["8.0", "8.0", "20.0%"]
