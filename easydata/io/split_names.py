"""The splits a data file's path names, as the Hugging Face `datasets` library reads them from file and folder
names (`data/train-00000-of-00002.parquet`, `dev.jsonl`, `test/`): for a Hub dataset (`easydata.io.hub`) and
a data directory laid out like one (`easydata.io.data_directories`)."""

from __future__ import annotations

import re

__all__ = ["SPLIT_NAMES", "splits_named", "names_split"]

#: A split and the words that name it in a data file's path, as the `datasets` library matches them: a
#: directory or a part of a file name between `/`, `_`, `.` and `-` (`data/train-00000-of-00002.parquet`,
#: `dev.jsonl`, `validation/`).
SPLIT_NAMES = {"train": ("train", "training"), "validation": ("validation", "valid", "val", "dev"),
               "test": ("test", "testing", "eval")}


def _words(path: str) -> set[str]:
    return {p for p in re.split(r"[/_.\-]", path.lower()) if p}


def names_split(path: str, split: str) -> bool:
    """Whether a data file's path inside its dataset's directory names `split`: by `SPLIT_NAMES`' words, or for
    a split of another name by that name between separators (`train_sft` in `data/train_sft-00000-of-00003.parquet`)."""
    if split in SPLIT_NAMES:
        return not _words(path).isdisjoint(SPLIT_NAMES[split])
    return re.search(rf"(?:^|[/_.\-]){re.escape(split.lower())}(?:[/_.\-]|$)", path.lower()) is not None


def splits_named(path: str) -> set[str]:
    """The splits of `SPLIT_NAMES` a data file's path inside its dataset's directory names: `{"train"}` for
    `data/train-00000-of-00001.parquet`, none for `web.jsonl`."""
    words = _words(path)
    return {split for split, names in SPLIT_NAMES.items() if not words.isdisjoint(names)}
