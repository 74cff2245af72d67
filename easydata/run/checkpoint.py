"""Resumable runs: what an interrupted run keeps, and how a rerun with `--resume` finds and trusts it.

Tokenizing is the expensive part of a run, so its results are kept per *work unit* (an input split,
whole small files read together, or a whole dataset read with `num_rows`: `easydata.io.sources.work_units`)
inside the run's staging directory:

    OUT/.easydata-tmp-<run>/run.json                          # signature (config + input splits), split sizes
    OUT/.easydata-tmp-<run>/checkpoints/<dataset>/u00003/b00000.arrow   # tokenized batch 0 of unit 3
    OUT/.easydata-tmp-<run>/checkpoints/<dataset>/u00003/unit.json      # written when unit 3 is read

Every file is written under a temporary name and renamed into place, so a file that exists is
complete. `unit.json` records how many batches the unit produced, its counters and the splits it read (a
resumed run takes a unit only for the same splits: `run_plan.resumable_units`); it may be written
before the unit's last batches are tokenized, so a unit counts as done only when `unit.json` *and*
all its batch files exist (`completed_units`). Everything after tokenizing (mixing, packing, the
shuffle, writing) is cheap and deterministic, so a resumed run loads the done units' batches, reads
and tokenizes the rest, and redoes the later stages: its output equals an uninterrupted run's.

`run.json` holds a signature of the config and of the planned input splits (paths, byte ranges and
file sizes): `--resume` reuses a staging directory only when the job is the same job on the same
inputs. It also records the split size each dataset was planned with: the default size depends on
the machine's cores, so a run resumed on another machine re-plans with the recorded size. All
functions here are pure filesystem code (fsspec), tested without Beam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from typing import Any, Iterable, Iterator, Optional, Sequence

import pyarrow as pa

from easydata.errors import InputError
from easydata.io.filesystems import get_fs, join, open_arrow_file, staging_ipc_options, open_file, open_regular, temp_name, write_atomic
from easydata.io.staged_columns import compact, restorer
from easydata.io.staging import TEMP_PREFIX, Staging

__all__ = ["run_signature", "write_run_info", "recorded_input_versions", "unfinished_runs", "batch_path", "write_batch",
           "read_batch", "write_unit", "UnitCheckpoint", "completed_units"]

RUN_INFO = "run.json"
_META_KEY = b"easydata.run.checkpoint"


def run_signature(fingerprint: str, splits: dict[str, list[Any]]) -> str:
    """A hash of the config fingerprint and every dataset's planned input splits."""
    data = {"config": fingerprint,
            "splits": {name: [s.as_dict() if hasattr(s, "as_dict") else s for s in ds_splits]
                       for name, ds_splits in sorted(splits.items())}}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:24]


def write_run_info(staging: str, signature: str, run_id: str, split_bytes: Optional[dict[str, int]] = None, *,
                   readers: Optional[dict[str, int]] = None, fingerprint: Optional[str] = None,
                   inputs: Optional[dict[str, str]] = None, id_sources: Optional[dict[str, str]] = None) -> None:
    """Records the run's signature, per dataset the split size and the readers its splits were planned
    with (`easydata.io.sources.plan_input`), the config fingerprint and what each input file was (`easydata.io.filesystems.file_version`), so a
    resume can refuse inputs edited since, and per dataset what its ids come from (`id_sources`: the
    tokenizer's content hash and the engine), so a resume can refuse a tokenizer replaced since."""
    info: dict[str, Any] = {"signature": signature, "run_id": run_id}
    if split_bytes is not None:
        info["split_bytes"] = split_bytes
    if readers is not None:
        info["readers"] = readers
    if fingerprint is not None:
        info["fingerprint"] = fingerprint
    if inputs is not None:
        info["inputs"] = inputs
    if id_sources is not None:
        info["id_sources"] = id_sources
    write_atomic(Staging(staging).run_info, json.dumps(info).encode())


def recorded_input_versions(staging: str) -> Optional[dict[str, str]]:
    """`RunPlan.input_versions` as `write_run_info` recorded them (`run.json`'s `inputs`): every input
    file's `file_version` when the run was planned; None when the run recorded none."""
    with open_file(Staging(staging).run_info, "rb", decompress=False) as f:
        inputs = json.load(f).get("inputs")
    return inputs if isinstance(inputs, dict) else None


def unfinished_runs(output_dir: str) -> list[dict[str, Any]]:
    """The `run.json` records of the unfinished runs in `output_dir`, newest first."""
    fs, root = get_fs(output_dir)
    if not fs.exists(root):
        return []
    found = []
    for path in fs.ls(root, detail=True):
        name = posixpath.basename(path["name"].rstrip("/"))
        if not name.startswith(TEMP_PREFIX) or path.get("type") != "directory":
            continue
        try:
            with open_regular(fs, join(path["name"], RUN_INFO), "rb") as f:
                info = json.load(f)
        except (OSError, ValueError, InputError):
            continue
        if isinstance(info, dict) and "signature" in info and "run_id" in info:
            found.append((fs.modified(join(path["name"], RUN_INFO)) if hasattr(fs, "modified") else 0, info))
    return [info for _, info in sorted(found, key=lambda f: f[0], reverse=True)]


def _unit_dir(staging: str, dataset: str, unit: int) -> str:
    return Staging(staging).checkpoint_unit(dataset, unit)


def batch_path(staging: str, dataset: str, unit: int, index: int) -> str:
    return join(_unit_dir(staging, dataset, unit), f"b{index:05d}.arrow")


def write_batch(path: str, rows: pa.RecordBatch, info: dict[str, Any]) -> None:
    """Writes one tokenized batch (Arrow IPC, LZ4: `staging_ipc_options`) with `info` in its schema metadata,
    held compactly (`easydata.io.staged_columns`: no all-ones attention mask, 16-bit ids where they fit)."""
    fs, target = get_fs(path)
    fs.makedirs(posixpath.dirname(target), exist_ok=True)
    rows = compact(rows.replace_schema_metadata({**(rows.schema.metadata or {}), _META_KEY: json.dumps(info).encode()}))
    temp = temp_name(path)  # its own per attempt: a retried or duplicate step may write the same batch
    with open_arrow_file(temp, "wb") as f, pa.ipc.new_file(f, rows.schema, options=staging_ipc_options()) as writer:
        writer.write_batch(rows)
    fs.mv(get_fs(temp)[1], target)


def read_batch(path: str) -> tuple[pa.RecordBatch, dict[str, Any]]:
    """A checkpointed batch, with the schema metadata it was written with, and its `info`."""
    with open_arrow_file(path) as f:
        reader = pa.ipc.open_file(f)
        batch = reader.get_batch(0) if reader.num_record_batches else reader.schema.empty_table().to_batches()[0]
        batch = restorer(reader.schema)(batch)
    metadata = dict(batch.schema.metadata or {})
    info = json.loads(metadata.pop(_META_KEY, b"{}"))
    return batch.replace_schema_metadata(metadata or None), info


def write_unit(staging: str, dataset: str, unit: int, *, batches: int, stats: dict[str, Any],
               rejected_file: Optional[str], splits: Sequence[int] = ()) -> None:
    """Records that a unit was read to the end: its batch count, counters (`RunCounters.to_json`),
    dead-letter file and the indexes of the splits it read (a resumed run takes it only for the same)."""
    info = {"batches": batches, "stats": stats, "rejected_file": rejected_file, "splits": list(splits or [unit])}
    write_atomic(join(_unit_dir(staging, dataset, unit), "unit.json"), json.dumps(info).encode())


@dataclasses.dataclass(frozen=True)
class UnitCheckpoint:
    """A done unit: its batch files, its reader counters and dead-letter file."""

    dataset: str
    unit: int
    batch_paths: tuple[str, ...]
    stats: dict[str, Any]  # its reader's counters (`easydata.run.counters.RunCounters.to_json`)
    rejected_file: Optional[str]
    splits: tuple[int, ...] = ()  # the indexes of the splits it read (a unit recorded without them: its own)

    def batches(self) -> Iterator[tuple[pa.RecordBatch, dict[str, Any]]]:
        for path in self.batch_paths:
            yield read_batch(path)


def completed_units(staging: str, dataset: str, units: Iterable[int]) -> dict[int, UnitCheckpoint]:
    """The units of `dataset` whose `unit.json` and every batch file exist (a unit recorded by an older
    version, whose counters are not a `RunCounters`, is read again)."""
    fs, _ = get_fs(staging)
    done = {}
    for unit in units:
        try:
            with open_file(join(_unit_dir(staging, dataset, unit), "unit.json"), "rb", decompress=False) as f:
                info = json.load(f)
        except Exception:  # absent or unreadable: not done
            continue
        if not isinstance(info.get("stats"), dict) or "counts" not in info["stats"]:
            continue
        paths = tuple(batch_path(staging, dataset, unit, i) for i in range(int(info["batches"])))
        if all(fs.exists(get_fs(p)[1]) for p in paths):
            done[unit] = UnitCheckpoint(dataset=dataset, unit=unit, batch_paths=paths, stats=info["stats"],
                                        rejected_file=info.get("rejected_file"),
                                        splits=tuple(int(i) for i in info.get("splits") or [unit]))
    return done
