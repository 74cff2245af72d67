"""Train / validation splits by document hash: `easydata.ops.splits`, its config, and real runs (the split
is deterministic, disjoint, independent of the shuffle seed and batching, and keeps windows together)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.errors import ConfigError
from easydata.ops.splits import assign_splits, document_keys, partition_rows
from easydata.tools.validate import validate_output
from tests.conftest import make_texts, write_jsonl


def test_assignment_is_a_pure_function_of_the_document_key():
    keys = [f"f.jsonl@{i * 37}" for i in range(20_000)]
    split = assign_splits(keys, [0.9, 0.1], dataset="web", split_seed=0)
    assert np.array_equal(split, assign_splits(keys, [0.9, 0.1], dataset="web", split_seed=0))
    assert abs(np.mean(split == 1) - 0.1) < 0.01
    assert not np.array_equal(split, assign_splits(keys, [0.9, 0.1], dataset="web", split_seed=1))
    assert not np.array_equal(split, assign_splits(keys, [0.9, 0.1], dataset="code", split_seed=0))
    three = assign_splits(keys, [0.5, 0.3, 0.2], dataset="web", split_seed=0)
    assert np.allclose(np.bincount(three) / len(keys), [0.5, 0.3, 0.2], atol=0.015)
    assert document_keys(["a.jsonl@12#w3", "a.jsonl@12", "b#w@4"]) == ["a.jsonl@12", "a.jsonl@12", "b#w@4"]


def test_partition_keeps_windows_with_their_document():
    keys = [f"a@{i}" for i in range(200)] + [f"a@{i}#w2" for i in range(200)]
    batch = pa.record_batch({"__key__": pa.array(keys), "n": pa.array(range(400))})
    parts = partition_rows(batch, dataset="d", names=["train", "validation"], fractions=[0.5, 0.5], split_seed=0)
    assert [name for name, _ in parts] == ["train", "validation"]
    seen = {}
    for name, rows in parts:
        for key in rows.column("__key__").to_pylist():
            seen.setdefault(key.split("#")[0], set()).add(name)
    assert sum(rows.num_rows for _, rows in parts) == 400 and all(len(s) == 1 for s in seen.values())


@pytest.mark.parametrize("save, message", [
    ({"validation_fraction": 0.1, "splits": {"a": 1, "b": 1}}, "not both"),
    ({"validation_fraction": 1.0}, "within \\(0, 1\\)"),
    ({"splits": {"train": 1}}, "at least two splits"),
    ({"splits": {"train": 1, "va l": 1}}, "split name 'va l'"),
    ({"splits": {"train": 1, "val": 0}}, "must be positive"),
])
def test_split_config_problems(save, message):
    with pytest.raises(ConfigError, match=message):
        PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"name": "a", "data_files": "x"}],
                                  "save": save})


def test_splits_with_streaming_are_refused():
    with pytest.raises(ConfigError, match="the streaming pipeline does not split yet"):
        PipelineConfig.from_dict({"default_tokenizer": "t", "save": {"validation_fraction": 0.1},
                                  "datasets": [{"name": "a", "pubsub_subscription": "projects/p/subscriptions/s"}]})


def test_splits_with_mix_are_refused():
    with pytest.raises(ConfigError, match="with a `mix` section is not supported yet"):
        PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"name": "a", "data_files": "x"}],
                                  "mix": {"weights": {"a": 1}}, "save": {"validation_fraction": 0.1}})


# ---- real runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """Unique documents (some long enough for several windows), two rejected records; returns the file,
    the texts and their document keys (`a.jsonl@<byte offset>`)."""
    root = tmp_path_factory.mktemp("split-corpus")
    texts = [f"doc{i} {t}" for i, t in enumerate(make_texts(300, seed=41, max_words=90))]
    records = [{"text": t} for t in texts]
    records.insert(5, {"text": ""})
    records.insert(50, {"other": 1})
    path = write_jsonl(root / "a.jsonl", records)
    keys, offset = [], 0
    for record, line in zip(records, path.read_bytes().splitlines(keepends=True)):
        if record.get("text"):
            keys.append(f"a.jsonl@{offset}")
        offset += len(line)
    return path, texts, keys


def _run(tmp_path: Path, tokenizer: Path, path: Path, name: str, **sections) -> dict:
    data = {"default_tokenizer": str(tokenizer), "datasets": [{"name": "web", "data_files": str(path)}],
            "tokenize": {"max_length": 24, "truncation": "window", "stride": 4}}
    data.update(sections)
    data["save"] = {"output_dir": str(tmp_path / name), "num_shards": 2, "validation_fraction": 0.25,
                    **sections.get("save", {})}
    manifest = run_batch(PipelineConfig.from_dict(data), ["--direct_num_workers=1"], show_progress=False).manifest
    report = validate_output(str(tmp_path / name))
    assert report.ok, report.summary()
    return manifest


def _rows(out: Path, output: str) -> list[list[int]]:
    return [row for shard in sorted((out / output).glob("*.parquet"))
            for row in pq.read_table(shard).column("input_ids").to_pylist()]


@pytest.mark.slow
def test_split_run_is_disjoint_deterministic_and_by_document(tmp_path, tokenizer_dir, corpus):
    path, texts, keys = corpus
    first = _run(tmp_path, tokenizer_dir, path, "a")
    other = _run(tmp_path, tokenizer_dir, path, "b", seed=99, tokenize={"max_length": 24, "truncation": "window",
                                                                        "stride": 4, "batch_size": 7})
    assert set(first["datasets"]) == set(other["datasets"]) == {"web/train", "web/validation"}
    assert first["splits"]["fractions"] == other["splits"]["fractions"] == {"train": 0.75, "validation": 0.25}
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    expected_split = assign_splits(keys, [0.75, 0.25], dataset="web", split_seed=0)
    for index, split in enumerate(["train", "validation"]):
        windows = sorted(_rows(tmp_path / "a", f"web/{split}"))
        assert windows == sorted(_rows(tmp_path / "b", f"web/{split}"))  # same split whatever seed / batching
        # A document's windows are all in its split: rebuild the split's documents from the expected texts.
        mine = [t for t, s in zip(texts, expected_split) if s == index]
        expected_windows = []
        for e in tokenizer.encode_batch(mine):
            ids = e.ids + [1]
            expected_windows += [ids[start:start + 24] for start in range(0, max(len(ids) - 4, 1), 20)]
        assert windows == sorted(expected_windows)
        entry = first["datasets"][f"web/{split}"]
        assert entry["documents_written"] == len(mine)
        assert entry["rows"] == len(mine) + entry["extra_windows"]
        assert entry["documents_rejected"] == (2 if split == "train" else 0)  # rejects: the first split
    train = {json.dumps(r) for r in _rows(tmp_path / "a", "web/train")}
    assert not train & {json.dumps(r) for r in _rows(tmp_path / "a", "web/validation")}
    assert first["documents_in"] == 302 and first["documents_rejected"] == 2


@pytest.mark.slow
def test_each_split_is_packed_on_its_own(tmp_path, tokenizer_dir, corpus):
    path, texts, _ = corpus
    manifest = _run(tmp_path, tokenizer_dir, path, "packed", pack={"enabled": True, "seq_length": 64},
                    tokenize={"max_length": None, "truncation": "none"})
    train, validation = manifest["datasets"]["web/train"], manifest["datasets"]["web/validation"]
    assert train["documents_written"] + validation["documents_written"] == len(texts)
    assert manifest["schema"]["packed"] and train["segments"] >= train["documents_written"]


@pytest.mark.slow
def test_a_split_no_document_fell_into_fails_the_run(tmp_path, tokenizer_dir):
    """Three documents and `validation_fraction: 0.01`: the validation split was committed empty, and the
    run looked successful until a reader of `web/validation` found 0 rows."""
    from easydata.errors import EasyDataError

    path = write_jsonl(tmp_path / "few.jsonl", [{"text": f"document {i}"} for i in range(3)])
    data = {"default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(path)}],
            "save": {"output_dir": str(tmp_path / "out"), "validation_fraction": 0.01}}
    expected = assign_splits(document_keys([f"few.jsonl@{o}" for o in (0, 23, 46)]), [0.99, 0.01], dataset="web",
                             split_seed=0)
    assert not expected.any()  # every document hashes into train
    with pytest.raises(EasyDataError, match=r"^split 'web/validation' holds no document: the 3 documents of dataset"
                                            r" 'web' went to its other splits \(save.validation_fraction 0.01\)"):
        run_batch(PipelineConfig.from_dict(data), ["--direct_num_workers=1"], show_progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()
    data["allow_empty_datasets"] = True
    manifest = run_batch(PipelineConfig.from_dict(data), ["--direct_num_workers=1"], show_progress=False).manifest
    assert manifest["datasets"]["web/validation"]["documents_written"] == 0
    assert manifest["datasets"]["web/train"]["documents_written"] == 3
