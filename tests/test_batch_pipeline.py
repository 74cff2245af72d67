"""The batch pipeline's wiring, run for real on Beam's local runner through the Python API.

Checks what no unit test can: tokens equal the tokenizer's own output after the whole pipeline,
counters add up, dead letters are written, and the output is byte-identical whatever the worker
count, bundle sizes, input splitting or shuffle grouping.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.tools.validate import validate_output
from tests.conftest import make_texts, write_jsonl

IN_PROCESS = ["--direct_num_workers=1"]


def _config(data_files: str, tokenizer: Path, out: Path, **save) -> PipelineConfig:
    return PipelineConfig.from_dict({
        "seed": 7,
        "default_tokenizer": str(tokenizer),
        "datasets": [{"name": "web", "data_files": data_files, "additional_fields": ["id"]}],
        "tokenize": {"batch_size": 64},
        "save": {"output_dir": str(out), "num_shards": 3, "row_group_size": 50, **save},
    })


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, list[str]]:
    texts = make_texts(700, seed=3)
    records = [{"text": t, "id": i} for i, t in enumerate(texts)]
    records.insert(10, {"text": ""})              # rejected: empty
    records.insert(20, {"body": "no text field"})  # rejected: missing field
    path = write_jsonl(tmp_path / "in" / "a.jsonl", records[:400])
    write_jsonl(tmp_path / "in" / "b.jsonl", records[400:])
    (path.parent / "b.jsonl").open("a").write("{not json\n")  # rejected: malformed
    return tmp_path / "in" / "*.jsonl", texts


@pytest.mark.slow
def test_tokens_equal_tokenizer_output_and_counters_add_up(corpus, tokenizer_dir, tmp_path):
    pattern, texts = corpus
    out = tmp_path / "out"
    result = run_batch(_config(str(pattern), tokenizer_dir, out), IN_PROCESS, show_progress=False)
    m = result.manifest
    assert m["documents_in"] == len(texts) + 3
    assert m["documents_written"] == len(texts)
    assert m["documents_rejected"] == 3
    rejected = [json.loads(line) for f in sorted((out / "rejected").rglob("*.jsonl")) for line in f.open()]
    assert sorted(r["reason"].split(":")[0] for r in rejected) == [
        "empty text", "malformed JSON", "missing content field 'text'"]
    assert all(r["source"].endswith((".jsonl")) and isinstance(r["position"], int) for r in rejected)

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    expected = {i: tok.encode(t).ids + [eos] for i, t in enumerate(texts)}
    table = pq.read_table(sorted((out / "web").glob("*.parquet")))
    got = dict(zip(table.column("id").to_pylist(), table.column("input_ids").to_pylist()))
    assert got == expected
    assert table.column("attention_mask").to_pylist() == [[1] * len(ids) for ids in table.column("input_ids").to_pylist()]
    assert m["totals"]["tokens"] == sum(len(v) for v in expected.values())
    assert [s["rows"] for s in m["datasets"]["web"]["shards"]] == [233, 233, 234]
    assert validate_output(str(out)).ok


def test_the_steps_that_free_the_most_return_free_memory(corpus, tokenizer_dir, tmp_path, monkeypatch):
    """Each input work unit, tokenize bundle, packed group and assembled shard ends with
    `easydata.memory.return_free_memory` (here glibc's `malloc_trim` is replaced by a counter:
    this test process is not a local job's, where the real one is set)."""
    import easydata.memory

    trims: list[int] = []
    monkeypatch.setattr(easydata.memory, "_malloc_trim", trims.append)
    pattern, _ = corpus
    config = _config(str(pattern), tokenizer_dir, tmp_path / "out")
    config = dataclasses.replace(config, pack=dataclasses.replace(config.pack, enabled=True, seq_length=256))
    result = run_batch(config, IN_PROCESS, show_progress=False)
    shards = len(result.manifest["datasets"]["web"]["shards"])
    assert shards == 3
    assert len(trims) >= 2 + 1 + 1 + shards and set(trims) == {0}  # 2 files: at least 2 units


@pytest.mark.slow
def test_output_identical_across_workers_bundles_splits_and_groups(corpus, tokenizer_dir, tmp_path):
    pattern, _ = corpus
    base = _config(str(pattern), tokenizer_dir, tmp_path / "a")
    run_batch(base, IN_PROCESS, show_progress=False)
    reference = _digest(tmp_path / "a")
    assert len(reference) == 3

    variant = base.replace(save=base.save.__class__(**{**base.save.__dict__, "output_dir": str(tmp_path / "b")}),
                           tokenize=base.tokenize.__class__(**{**base.tokenize.__dict__, "batch_size": 7}))
    # Two worker processes, tiny batches, input cut into ~2 KB splits, 8 shuffle groups.
    run_batch(variant, ["--direct_num_workers=2"], show_progress=False, split_bytes=2048, group_bytes=4096)
    assert _digest(tmp_path / "b") == reference


@pytest.mark.slow
def test_every_output_format_round_trips(corpus, tokenizer_dir, tmp_path):
    pattern, texts = corpus
    for fmt, compression in [("arrow", "lz4"), ("jsonl", "gzip")]:
        out = tmp_path / fmt
        run_batch(_config(str(pattern), tokenizer_dir, out, format=fmt, compression=compression), IN_PROCESS,
                  show_progress=False)
        report = validate_output(str(out))
        assert report.ok, report.problems
        assert report.rows == len(texts)



@pytest.mark.slow
def test_field_types_that_vary_between_batches_converge(tokenizer_dir, tmp_path):
    """`id` is an int in most records, text or a list in a few: every bundling gives the same text column."""
    records = [{"text": f"document number {i}", "id": i} for i in range(60)]
    records[45]["id"] = "forty-five"
    records[50]["id"] = [5, 0]
    write_jsonl(tmp_path / "in" / "a.jsonl", records)
    digests = []
    for batch_size in (4, 1000):
        out = tmp_path / f"out{batch_size}"
        cfg = _config(str(tmp_path / "in" / "a.jsonl"), tokenizer_dir, out)
        cfg = cfg.replace(tokenize=cfg.tokenize.__class__(batch_size=batch_size))
        run_batch(cfg, IN_PROCESS, show_progress=False)
        table = pq.read_table(sorted((out / "web").glob("*.parquet")))
        assert sorted(table.column("id").to_pylist()) == sorted([str(i) for i in range(60) if i not in (45, 50)]
                                                                + ["forty-five", "[5, 0]"])
        digests.append(_digest(out))
    assert digests[0] == digests[1]


@pytest.mark.slow
@pytest.mark.parametrize("pack", [False, True], ids=["sorted", "packed"])
def test_the_shuffle_dictionary_of_a_many_group_run_changes_bytes_shuffled_not_the_output(
        corpus, tokenizer_dir, tmp_path, monkeypatch, pack):
    """A run with at least `MIN_GROUPS` hash groups trains a zstd dictionary at planning and its shuffle
    elements travel compressed with it (fewer bytes through the shuffle); the shards are byte-identical
    to the same run's without a dictionary, through Beam's GroupByKey and through group files."""
    import easydata.ops.shuffle_dictionary as shuffle_dictionary
    from easydata.run.run_plan import prepare_run

    pattern, _ = corpus
    manifests, digests = [], []
    for label, min_groups in (("with", 1024), ("without", 10**9)):
        monkeypatch.setattr(shuffle_dictionary, "MIN_GROUPS", min_groups)
        config = _config(str(pattern), tokenizer_dir, tmp_path / label)
        if pack:
            config = config.replace(pack=config.pack.__class__(**{**config.pack.__dict__, "enabled": True,
                                                                    "seq_length": 128}))
        plan = prepare_run(config, group_bytes=64)  # ~4,096 groups for this small corpus
        assert max(d.num_groups for d in plan.datasets) >= 1024
        assert (plan.shuffle_dictionary is not None) == (label == "with")
        run_batch(config, IN_PROCESS if label == "with" else ["--direct_num_workers=2"], show_progress=False,
                  group_bytes=64)
        manifests.append(json.loads((tmp_path / label / "manifest.json").read_text()))
        digests.append(_digest(tmp_path / label))
    assert digests[0] == digests[1] and len(digests[0]) == 3
    shuffled = [m["shuffle"]["bytes"] for m in manifests]
    assert shuffled[0] < 0.95 * shuffled[1]
    assert manifests[0]["shuffle"]["dictionary_bytes"] > 1000 and "dictionary_bytes" not in manifests[1]["shuffle"]
