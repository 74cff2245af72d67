"""The staging layout, one owner: every path under a run's staging directory `OUT/.easydata-tmp-<run id>/`.

    .easydata-tmp-<run>/run.json                                   what `--resume` checks (`easydata.run.checkpoint`)
    .easydata-tmp-<run>/commit.json                                the commit journal's copy (`easydata.run.output`)
    .easydata-tmp-<run>/checkpoints/<dataset>/u00003/b00000.arrow  tokenized batch 0 of work unit 3
    .easydata-tmp-<run>/checkpoints/<dataset>/u00003/unit.json     written when unit 3 is read
    .easydata-tmp-<run>/groups/<stage>/<output>/...                a local group-by's files (`easydata.io.group_files`)
    .easydata-tmp-<run>/sorted/<output>/g000042.arrow              a sorted or packed hash group
    .easydata-tmp-<run>/pieces/<output>/<window>.arrow             a streaming window's rows
    .easydata-tmp-<run>/rejected/<dataset>/<name>.jsonl            dead letters (moved into the output by the commit)
    .easydata-tmp-<run>/tokenizers/<hub id>/                       hub tokenizers shipped to remote workers
    .easydata-tmp-<run>/<output>/part-00000-of-00002.parquet       shards (moved into the output by the commit)

Every file is written under a temporary name and renamed (`easydata.io.filesystems.write_atomic`), so a file
that exists is whole. The paths are strings of any file system (`join`): local, `gs://`, `s3://`, `memory://`.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Optional

from easydata.io.filesystems import join

__all__ = ["TEMP_PREFIX", "Staging"]

#: The name of every staging directory starts so (`.easydata-tmp-<run id>`): hidden, and never an output's.
TEMP_PREFIX = ".easydata-tmp-"


@dataclasses.dataclass(frozen=True)
class Staging:
    """One run's staging directory (`root`) and the paths inside it."""

    root: str

    @classmethod
    def of_run(cls, output_dir: str, run_id: str) -> "Staging":
        return cls(join(output_dir, TEMP_PREFIX + run_id))

    @property
    def name(self) -> str:
        """`.easydata-tmp-<run id>`."""
        return posixpath.basename(self.root.rstrip("/"))

    @property
    def run_id(self) -> str:
        return self.name[len(TEMP_PREFIX):]

    def file(self, relative: str) -> str:
        """A staged file by its path relative to the staging directory (shards, dead letters: the paths the
        commit moves to the same relative path in the output)."""
        return join(self.root, relative)

    @property
    def run_info(self) -> str:
        return self.file("run.json")

    @property
    def journal_copy(self) -> str:
        return self.file("commit.json")

    def checkpoint_unit(self, dataset: str, unit: int) -> str:
        """The folder of one work unit's checkpoint: its batch files and `unit.json`."""
        return join(self.root, "checkpoints", dataset, f"u{unit:05d}")

    def groups(self, stage: Optional[str] = None, output: Optional[str] = None) -> str:
        """Local group-by files: all of them, one stage's (`pack`, `sort`), or one stage's of one output."""
        parts = [p for p in (stage, output) if p is not None]
        return join(self.root, "groups", *parts)

    def sorted_group(self, output: str, group: int) -> str:
        """A hash group's sorted (or packed) rows: one deterministic name, so a retried bundle rewrites it."""
        return join(self.root, "sorted", output, f"g{group:06d}.arrow")

    def window_piece(self, output: str, window: str) -> str:
        """A streaming window's rows before they are written as its shard."""
        return join(self.root, "pieces", output, f"{window}.arrow")

    def rejected(self, dataset: Optional[str] = None) -> str:
        """The dead-letter folder, or one dataset's."""
        return join(self.root, "rejected", *([dataset] if dataset is not None else []))

    def tokenizer(self, name: str) -> str:
        """Where a hub tokenizer's files are shipped for remote workers."""
        return join(self.root, "tokenizers", name)
