"""Tests for `easydata.io.data_directories`: what of a directory given as `data_files` is read. A dataset laid
out by split as the Hub and `datasets` lay it out, and a Hugging Face cache folder of several revisions, were
read whole: the test split trained with the rest, each document once per revision (hostile round 9)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from easydata.config import DatasetConfig, PipelineConfig
from easydata.errors import ConfigError, InputError
from easydata.io.split_names import names_split, splits_named
from easydata.io.hub import _split_files
from easydata.io.sources import plan_input, read_splits


def _texts(ds: DatasetConfig) -> list[str]:
    rejects: list = []
    texts = sorted(t for b in read_splits(plan_input(ds).splits, ds, rejects=rejects) for t in b.texts)
    assert rejects == []
    return texts


def _hub_layout(root: Path) -> Path:
    """A dataset as `huggingface-cli download` or a Hub snapshot has it: a card and a file per split."""
    (root / "data").mkdir(parents=True)
    for split, texts in {"train": ["train a", "train b"], "test": ["TEST a"], "validation": ["VAL a"]}.items():
        pq.write_table(pa.table({"text": texts}), root / "data" / f"{split}-00000-of-00001.parquet")
    (root / "README.md").write_text("---\nlicense: mit\n---\n# card\n")
    return root


def test_splits_named_by_the_hubs_conventions() -> None:
    assert splits_named("data/train-00000-of-00002.parquet") == {"train"}
    assert splits_named("dev.jsonl") == {"validation"} and splits_named("valid/part_0.jsonl") == {"validation"}
    assert splits_named("eval.jsonl") == {"test"} and splits_named("test/data-00000-of-00001.arrow") == {"test"}
    assert splits_named("web.jsonl") == set() and splits_named("contest_problems.jsonl") == set()
    assert splits_named("latest.jsonl") == set() and splits_named("interval.jsonl") == set()
    assert names_split("extra-00000.parquet", "extra") and not names_split("extras.parquet", "extra")
    assert names_split("data/train_sft-00000-of-00003.parquet", "train_sft")  # UltraChat's split names
    assert not names_split("data/train_gen-00000-of-00003.parquet", "train_sft")
    assert names_split("data/train_sft-00000-of-00003.parquet", "train")
    files = ["README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
             "data/validation-00000-of-00001.parquet", "test.jsonl"]
    assert _split_files(files, "train") == files[1:3] and _split_files(files, "test") == ["test.jsonl"]


def test_a_directory_of_split_files_reads_the_train_split_and_says_what_it_left_out(tmp_path, capsys) -> None:
    """Every split's files were read: the test and validation splits were trained with train."""
    d = _hub_layout(tmp_path / "hub")
    assert _texts(DatasetConfig(name="web", data_files=str(d))) == ["train a", "train b"]
    err = capsys.readouterr().err
    assert (f"dataset 'web': data directory '{d}' holds the splits test, train, validation (by file name, as Hugging"
            " Face `datasets` names them): split 'train' is read, 2 file(s) of the others are not (set the dataset's"
            " `split`, or name the files in data_files, to read them): data/test-00000-of-00001.parquet,"
            " data/validation-00000-of-00001.parquet") in err
    assert _texts(DatasetConfig(name="web", data_files=str(d), split="validation")) == ["VAL a"]
    assert _texts(DatasetConfig(name="web", data_files=str(d / "data" / "*.parquet"))) == \
        ["TEST a", "VAL a", "train a", "train b"]  # a glob names its files: all read, as asked


def test_files_naming_no_split_are_train_where_none_names_train(tmp_path, capsys) -> None:
    d = tmp_path / "books"
    d.mkdir()
    (d / "books.jsonl").write_text(json.dumps({"text": "a book"}) + "\n")
    (d / "books-val.jsonl").write_text(json.dumps({"text": "held out"}) + "\n")
    assert _texts(DatasetConfig(name="b", data_files=str(d))) == ["a book"]
    assert "1 file(s) of the others are not" in capsys.readouterr().err
    assert _texts(DatasetConfig(name="b", data_files=str(d), split="validation")) == ["held out"]


def test_a_directory_without_split_names_is_read_whole_and_split_is_refused_there(tmp_path, capsys) -> None:
    d = tmp_path / "web"
    d.mkdir()
    for name in ("a.jsonl", "train-b.jsonl"):
        (d / name).write_text(json.dumps({"text": name}) + "\n")
    assert _texts(DatasetConfig(name="w", data_files=str(d))) == ["a.jsonl", "train-b.jsonl"]
    assert "not read" not in capsys.readouterr().err
    with pytest.raises(InputError, match=r"`split: test` chooses among the split files of a data directory"):
        plan_input(DatasetConfig(name="w", data_files=str(d / "a.jsonl"), split="test"))
    with pytest.raises(InputError, match=r"no directory in its data_files has files named by split"):
        plan_input(DatasetConfig(name="w", data_files=str(tmp_path / "*" / "*.jsonl"), split="train"))


def test_a_directory_of_other_splits_only_says_which_split_to_read(tmp_path) -> None:
    d = tmp_path / "evals"
    d.mkdir()
    for name in ("dev.jsonl", "test.jsonl"):
        (d / name).write_text(json.dumps({"text": name}) + "\n")
    with pytest.raises(InputError, match=r"holds the splits test, validation \(by file name\) and no file of split"
                                         r" 'train': set the dataset's `split`"):
        plan_input(DatasetConfig(name="e", data_files=str(d)))
    assert _texts(DatasetConfig(name="e", data_files=str(d), split="test")) == ["test.jsonl"]


def test_a_datasetdict_saved_to_disk_reads_its_train_split(tmp_path) -> None:
    """`DatasetDict.save_to_disk` writes `train/` and `test/` beside `dataset_dict.json`: both were read."""
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["t0", "t1"]}),
                          "test": datasets.Dataset.from_dict({"text": ["held out"]})}).save_to_disk(str(tmp_path / "dd"))
    assert _texts(DatasetConfig(name="d", data_files=str(tmp_path / "dd"))) == ["t0", "t1"]
    assert _texts(DatasetConfig(name="d", data_files=str(tmp_path / "dd"), split="test")) == ["held out"]


def _cache_folder(root: Path, revisions: dict[str, list[str]], main: str | None) -> Path:
    """A Hugging Face cache folder (`datasets--owner--name`): blobs, refs and one snapshot of links per revision."""
    repo = root / "datasets--owner--name"
    (repo / "blobs").mkdir(parents=True)
    for i, (revision, texts) in enumerate(revisions.items()):
        blob = repo / "blobs" / f"{i:040x}"
        pq.write_table(pa.table({"text": texts}), blob)
        (repo / "snapshots" / revision / "data").mkdir(parents=True)
        (repo / "snapshots" / revision / "data" / "train-00000-of-00001.parquet").symlink_to(
            Path("../../../blobs") / blob.name)
    if main is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(main)
    return repo


def test_a_cache_folder_reads_the_revision_refs_main_names(tmp_path, capsys) -> None:
    """Every revision's snapshot was read: each document once per revision downloaded."""
    old, new = "a" * 40, "b" * 40
    repo = _cache_folder(tmp_path, {old: ["doc v1"], new: ["doc v2"]}, main=new)
    assert _texts(DatasetConfig(name="d", data_files=str(repo))) == ["doc v2"]
    assert (f"data directory '{repo}' is a Hugging Face cache folder: revision {new[:12]} (refs/main) is read, 1"
            " file(s) of other revisions are not: train-00000-of-00001.parquet") in capsys.readouterr().err
    (repo / "refs" / "main").write_text(old)
    assert _texts(DatasetConfig(name="d", data_files=str(repo))) == ["doc v1"]


def test_a_cache_folder_of_one_revision_reads_it_and_of_several_without_main_says_which(tmp_path) -> None:
    repo = _cache_folder(tmp_path / "one", {"c" * 40: ["only"]}, main=None)
    assert _texts(DatasetConfig(name="d", data_files=str(repo))) == ["only"]
    repo = _cache_folder(tmp_path / "two", {"c" * 40: ["x"], "d" * 40: ["y"]}, main="not-a-revision\n")
    with pytest.raises(InputError, match=r"is a Hugging Face cache folder with 2 revisions \(cccccccccccc,"
                                         r" dddddddddddd\) and no refs/main naming one: give one snapshots/<revision>"):
        plan_input(DatasetConfig(name="d", data_files=str(repo)))


def test_split_is_a_dataset_setting_for_directories_too() -> None:
    config = PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"data_files": "d/", "split": "validation"}]})
    assert config.datasets[0].split == "validation"
    with pytest.raises(ConfigError, match=r"`split` names a split \(train, validation, test, \.\.\.\), got ''"):
        PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"data_files": "d/", "split": ""}]})


def test_the_cli_trains_the_train_split_of_a_hub_layout(tmp_path, tokenizer_dir) -> None:
    d = _hub_layout(tmp_path / "hub")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": str(tmp_path / "out")},
                                  "datasets": [{"name": "web", "data_files": str(d)}]}))
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "split 'train' is read, 2 file(s) of the others are not" in done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["datasets"]["web"]["documents_in"] == 2


def test_a_split_of_another_name_is_chosen_by_its_whole_name(tmp_path) -> None:
    """UltraChat's and UltraFeedback's files are named by split `train_sft`, `test_sft`, `train_gen`, ...:
    `split: train_sft` found no file (its words were compared one by one)."""
    d = tmp_path / "ultrachat" / "data"
    d.mkdir(parents=True)
    for split in ("train_sft", "test_sft", "train_gen"):
        pq.write_table(pa.table({"text": [split]}), d / f"{split}-00000-of-00001.parquet")
    root = tmp_path / "ultrachat"
    assert _texts(DatasetConfig(name="u", data_files=str(root), split="train_sft")) == ["train_sft"]
    assert _texts(DatasetConfig(name="u", data_files=str(root))) == ["train_gen", "train_sft"]
