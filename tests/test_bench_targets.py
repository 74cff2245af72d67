"""`benchmarks/bench_targets.py`'s rounds: each run's ratio is taken to the ceiling measured around it (the host's
speed drifts between rounds and within one), and the medians, their range, the peak memory and the shards' digest
summarise them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_targets  # noqa: E402


def _run(seconds: float, *, tokens: int = 1_000, peak: int = 100, digest: str = "d1", returncode: int = 0,
         ceiling: float | None = None) -> dict:
    return {"seconds": seconds, "tokens": tokens, "peak_tree_pss": peak, "digest": digest, "returncode": returncode,
            "log": "log.txt", "ceiling": ceiling}


def test_each_run_is_divided_by_the_ceiling_around_it_and_the_median_is_taken():
    rounds = [  # a fast host round, a slow one and a middle one: the pipeline's speed follows the ceiling's
        (100.0, {"default": _run(1.0, peak=90, ceiling=100.0), "default, Parquet input": _run(0.5, peak=300,
                                                                                               ceiling=100.0)}),
        (50.0, {"default": _run(2.0, peak=110, ceiling=50.0), "default, Parquet input": _run(2.5, peak=100,
                                                                                              ceiling=50.0)}),
        # the host slowed within the round: its Parquet run is divided by its own, slower ceiling
        (80.0, {"default": _run(1.0, peak=100, ceiling=80.0), "default, Parquet input": _run(1.0, peak=200,
                                                                                              ceiling=40.0)}),
    ]
    rate, runs = bench_targets.median_round(rounds)
    assert rate == 80.0
    default = runs["default"]
    assert default["ratios"] == [10.0, 10.0, 12.5] and default["ratio"] == 10.0
    assert default["seconds"] == 1.0 and default["peak_tree_pss"] == 100 and default["digest"] == "d1"
    parquet = runs["default, Parquet input"]
    assert parquet["ratios"] == [20.0, 8.0, 25.0] and parquet["ratio"] == 20.0
    assert parquet["per_jsonl"] == 1.0  # 2.0, 0.8, 1.0: each over its own round's JSONL run
    assert parquet["peak_tree_pss"] == 200


def test_a_run_is_divided_by_the_mean_of_the_ceilings_before_and_after_it():
    assert bench_targets.bracket(100.0, 60.0) == 80.0
    assert bench_targets.bracket(None, 60.0) == 60.0 and bench_targets.bracket(100.0, None) == 100.0
    assert bench_targets.bracket(None, None) is None


def test_each_run_of_a_round_gets_the_ceilings_measured_around_it(monkeypatch, tmp_path):
    ceilings = iter([100.0, 50.0, 40.0, 20.0])  # the host slows down through the round
    monkeypatch.setattr(bench_targets.bp, "encode_single_thread",
                        lambda *a, **k: {"tokens": next(ceilings), "seconds": 1.0})
    monkeypatch.setattr(bench_targets, "parquet_copy", lambda corpus: corpus)
    monkeypatch.setattr(bench_targets, "run", lambda label, *a, **k: _run(1.0) | {"label": label})
    args = bench_targets.argparse.Namespace(no_parquet=False, no_hf=False, workdir=tmp_path)
    rate, runs = bench_targets.measure_round("qwen3", tmp_path, tmp_path, tmp_path, 2, args)
    assert [(label, r["label"], r["ceiling"]) for label, r in runs.items()] == [
        ("default", "qwen3-default", 75.0), ("default, Parquet input", "qwen3-parquet", 45.0),
        ("engine: hf", "qwen3-hf", 30.0)]
    assert rate == 40.0  # the median of the round's four ceilings (the lower middle one)


def test_a_failed_round_or_shards_that_differ_between_rounds_are_shown():
    failed = _run(1.0, returncode=1)
    rate, runs = bench_targets.median_round([(10.0, {"default": _run(1.0, ceiling=10.0)}),
                                             (10.0, {"default": failed})])
    assert runs["default"] is failed
    _, runs = bench_targets.median_round([(10.0, {"default": _run(1.0, digest="aa")}),
                                         (10.0, {"default": _run(1.0, digest="bb")})])
    assert runs["default"]["digest"] == "DIFFER: aa, bb"


def test_one_round_is_its_own_median():
    _, runs = bench_targets.median_round([(4.0, {"default": _run(0.5, tokens=10, ceiling=4.0)})])
    assert runs["default"]["ratios"] == [5.0] and runs["default"]["ratio"] == 5.0


def test_a_relative_workdir_is_named_from_the_root(tmp_path, monkeypatch):
    """Measured commands run in their log's directory, so a relative `--workdir` (its configs, outputs and
    logs) is made absolute where it is parsed; a relative one made every run fail with a missing config."""
    import bench_pipeline

    monkeypatch.chdir(tmp_path)
    assert bench_pipeline.absolute_path("work/targets") == tmp_path / "work" / "targets"
    assert bench_pipeline.parse_args(["--workdir", "work"]).workdir == tmp_path / "work"
    assert bench_pipeline.parse_args([]).workdir == bench_pipeline.DEFAULT_WORKDIR
