"""What of a directory given as `data_files` is the dataset's input.

A path or a glob names its files; a directory is taken as people keep datasets in one, and holds more than
the data wanted:

- metadata beside the data: a dataset card (`README.md`), a LICENSE, `save_to_disk`'s `dataset_info.json`
  and `state.json` (`METADATA_FILES`, and files of another type than most of the directory's bytes);
- the splits of a dataset laid out as the Hugging Face Hub and `datasets` lay them out
  (`data/train-00000-of-00002.parquet`, `test.jsonl`, `validation/`, `save_to_disk`'s `train/` and `test/`):
  one split is read, `train` unless the dataset's `split` says another; every split's files were read
  before, the test split trained with the rest;
- a Hugging Face cache folder (`datasets--owner--name`, with `blobs/`, `refs/` and a `snapshots/<revision>/`
  per revision downloaded): the revision `refs/main` names is read (or the only one); every revision's files
  were read, each document once per revision.

What is left out is said in one warning per directory. Files named by a path or a glob are all inputs, as
they were asked for. Pure Python over the listing: nothing here opens a data file.
"""

from __future__ import annotations

import os
import posixpath
import sys
from typing import Optional

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.filesystems import directory_root, read_text, strip_compression
from easydata.io.split_names import names_split, splits_named

__all__ = ["infer_type", "dataset_files", "METADATA_FILES"]

_EXTENSION_TYPES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
                    ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".csv": "csv", ".tsv": "csv",
                    ".txt": "txt", ".text": "txt", ".md": "txt"}

#: The input types a file name can imply, as a message lists them.
_TYPE_LIST = ", ".join(sorted(set(_EXTENSION_TYPES.values())))


def infer_type(path: str) -> str:
    """The input type implied by a file name (compression suffix ignored)."""
    _, ext = os.path.splitext(strip_compression(path).lower())
    if ext not in _EXTENSION_TYPES:
        raise InputError(f"cannot infer the input type of '{path}' from its extension; set the dataset's"
                         f" `type` ({_TYPE_LIST})")
    return _EXTENSION_TYPES[ext]

#: Files a dataset's directory holds beside its data (lower case): Hugging Face's dataset card and what
#: `datasets`' `save_to_disk` writes beside its Arrow files.
METADATA_FILES = frozenset({"readme.md", "dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"})

def dataset_files(dataset: DatasetConfig, files: list[str], directories: dict[str, str],
                  facts: dict[str, tuple[int, str]]) -> list[str]:
    """Of the listed `files`, those that are the dataset's inputs (`directories`: the directory given as
    `data_files` each file was found in, `list_data_files`'; `facts`: each file's size and version): the
    module's rules, per directory.

    Raises:
      InputError: a directory holds no file of a known type, a cache folder several revisions and no
        `refs/main`, no file of the split to read; `split` set and no directory names splits.
    """
    found = [f for f in files if f in directories]
    if not found:
        if dataset.split is not None and dataset.type != "huggingface":
            raise _split_not_named(dataset)
        return files
    by_directory: dict[str, list[str]] = {}
    for f in found:
        by_directory.setdefault(directories[f], []).append(f)
    kept: set[str] = set()
    splits_seen = False
    for directory, inner in by_directory.items():
        chosen, named = _directory_inputs(dataset, directory, inner, facts)
        kept.update(chosen)
        splits_seen = splits_seen or named
    if dataset.split is not None and not splits_seen:
        raise _split_not_named(dataset)
    return [f for f in files if f not in directories or f in kept]


def _directory_inputs(dataset: DatasetConfig, directory: str, files: list[str],
                      facts: dict[str, tuple[int, str]]) -> tuple[list[str], bool]:
    """The inputs among the `files` listed in `directory`, and whether their names mark splits; each rule
    that leaves files out says so in a warning."""
    root = directory_root(directory).rstrip("/") + "/"
    inner = {f: f[len(root):] if f.startswith(root) else posixpath.basename(f) for f in files}
    where = f"dataset '{dataset.name}': data directory '{directory}'"

    revision_of = _cache_revision(directory, inner)
    if revision_of is not None:  # its blobs/ and refs/ are the cache's own, its snapshots' data
        revision, why = revision_of
        prefix = f"snapshots/{revision}/"
        others = [f for f, rel in inner.items() if rel.startswith("snapshots/") and not rel.startswith(prefix)]
        if others:
            _warn(f"{where} is a Hugging Face cache folder: revision {revision[:12]} ({why}) is read, {len(others)}"
                  " file(s) of other revisions are not", [posixpath.basename(f) for f in others])
        inner = {f: rel[len(prefix):] for f, rel in inner.items() if rel.startswith(prefix)}

    kinds = {}
    for f in inner:
        if posixpath.basename(strip_compression(f)).lower() not in METADATA_FILES:
            try:
                kinds[f] = dataset.type if dataset.type not in (None, "huggingface") else infer_type(f)
            except InputError:
                pass
    by_type: dict[str, int] = {}
    for f, kind in kinds.items():
        by_type[kind] = by_type.get(kind, 0) + facts[f][0] + 1
    if not by_type:
        raise InputError(f"{where} holds no file of a known input type; set the dataset's `type` ({_TYPE_LIST})")
    wanted = max(sorted(by_type), key=by_type.__getitem__)
    other_types = [f for f in inner if kinds.get(f) != wanted]
    if other_types:
        _warn(f"dataset '{dataset.name}': {len(other_types)} file(s) in its data directory are not {wanted} input"
              " (metadata or another type) and are not read", [posixpath.basename(f) for f in other_types])
    data = [f for f in inner if kinds.get(f) == wanted]

    named = {f: splits_named(inner[f]) for f in data}
    marked = any(named.values())
    every = set().union(*named.values())
    if every - {"train"} or dataset.split is not None and marked:
        split = dataset.split or "train"
        chosen = [f for f in data if names_split(inner[f], split)]
        if not chosen and split == "train":  # as the `datasets` library has it: files naming no split are train
            chosen = [f for f in data if not named[f]]
        if not chosen:
            raise InputError(f"{where} holds the splits {', '.join(sorted(every))} (by file name) and no file of"
                             f" split '{split}': set the dataset's `split`, or name the files to read in data_files")
        others = [f for f in data if f not in chosen]
        if others:
            _warn(f"{where} holds the splits {', '.join(sorted(every | {split}))} (by file name, as Hugging Face"
                  f" `datasets` names them): split '{split}' is read, {len(others)} file(s) of the others are not"
                  " (set the dataset's `split`, or name the files in data_files, to read them)", [inner[f] for f in others])
        data = chosen
    return data, marked


def _cache_revision(directory: str, inner: dict[str, str]) -> Optional[tuple[str, str]]:
    """`(revision, why it is the one)` when `directory` is a Hugging Face cache folder (its files under
    `blobs/`, `refs/` and `snapshots/<revision>/`), else None.

    Raises:
      InputError: several revisions and no `refs/main` naming one of them.
    """
    paths = inner.values()
    revisions = sorted({rel.split("/")[1] for rel in paths if rel.startswith("snapshots/") and rel.count("/") >= 2})
    if not revisions or not any(rel.startswith(("blobs/", "refs/")) for rel in paths):
        return None
    main = next((f for f, rel in inner.items() if rel == "refs/main"), None)
    if main is not None:
        try:
            named = read_text(main).strip()
        except (OSError, UnicodeDecodeError):  # not a ref the cache wrote: as if there were none
            named = ""
        if named in revisions:
            return named, "refs/main"
    if len(revisions) == 1:
        return revisions[0], "its only snapshot"
    raise InputError(f"data directory '{directory}' is a Hugging Face cache folder with {len(revisions)} revisions"
                     f" ({', '.join(r[:12] for r in revisions)}) and no refs/main naming one: give one"
                     " snapshots/<revision> directory as data_files")


def _warn(message: str, names: list[str]) -> None:
    """`message`, then the first few of the files' `names`, as one warning."""
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    print(f"easydata: warning: {message}: {shown}", file=sys.stderr)


def _split_not_named(dataset: DatasetConfig) -> InputError:
    return InputError(f"dataset '{dataset.name}': `split: {dataset.split}` chooses among the split files of a data"
                      " directory (train-*.parquet, test.jsonl, validation/...), and no directory in its data_files"
                      " has files named by split; name the files to read in data_files")

