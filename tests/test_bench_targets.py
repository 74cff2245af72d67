"""`benchmarks/bench_targets.py`'s rounds: each run's ratio is taken to the ceiling of its own round (the host's
speed drifts between rounds), and the medians, their range, the peak memory and the shards' digest summarise them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_targets  # noqa: E402


def _run(seconds: float, *, tokens: int = 1_000, peak: int = 100, digest: str = "d1", returncode: int = 0) -> dict:
    return {"seconds": seconds, "tokens": tokens, "peak_tree_pss": peak, "digest": digest, "returncode": returncode,
            "log": "log.txt"}


def test_each_run_is_divided_by_its_own_rounds_ceiling_and_the_median_is_taken():
    rounds = [  # a fast host round, a slow one and a middle one: the pipeline's speed follows the ceiling's
        (100.0, {"default": _run(1.0, peak=90), "default, Parquet input": _run(0.5, peak=300)}),
        (50.0, {"default": _run(2.0, peak=110), "default, Parquet input": _run(2.5, peak=100)}),
        (80.0, {"default": _run(1.0, peak=100), "default, Parquet input": _run(1.0, peak=200)}),
    ]
    rate, runs = bench_targets.median_round(rounds)
    assert rate == 80.0
    default = runs["default"]
    assert default["ratios"] == [10.0, 10.0, 12.5] and default["ratio"] == 10.0
    assert default["seconds"] == 1.0 and default["peak_tree_pss"] == 100 and default["digest"] == "d1"
    parquet = runs["default, Parquet input"]
    assert parquet["per_jsonl"] == 1.0  # 2.0, 0.8, 1.0: each over its own round's JSONL run
    assert parquet["peak_tree_pss"] == 200


def test_a_failed_round_or_shards_that_differ_between_rounds_are_shown():
    failed = _run(1.0, returncode=1)
    rate, runs = bench_targets.median_round([(10.0, {"default": _run(1.0)}), (10.0, {"default": failed})])
    assert runs["default"] is failed
    _, runs = bench_targets.median_round([(10.0, {"default": _run(1.0, digest="aa")}),
                                         (10.0, {"default": _run(1.0, digest="bb")})])
    assert runs["default"]["digest"] == "DIFFER: aa, bb"


def test_one_round_is_its_own_median():
    _, runs = bench_targets.median_round([(4.0, {"default": _run(0.5, tokens=10)})])
    assert runs["default"]["ratios"] == [5.0] and runs["default"]["ratio"] == 5.0


def test_a_relative_workdir_is_named_from_the_root(tmp_path, monkeypatch):
    """Measured commands run in their log's directory, so a relative `--workdir` (its configs, outputs and
    logs) is made absolute where it is parsed; a relative one made every run fail with a missing config."""
    import bench_pipeline

    monkeypatch.chdir(tmp_path)
    assert bench_pipeline.absolute_path("work/targets") == tmp_path / "work" / "targets"
    assert bench_pipeline.parse_args(["--workdir", "work"]).workdir == tmp_path / "work"
    assert bench_pipeline.parse_args([]).workdir == bench_pipeline.DEFAULT_WORKDIR
