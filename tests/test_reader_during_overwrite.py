"""Readers and `overwrite: true`: a reader sees the old or the new complete output, never a mix.

Each test replaces a real output with the functions a run's commit uses (`commit_output`, then
`write_manifest`, then `finish_commit`, as `easydata.run.finalize` calls them), stopping between the
steps where a reader could start.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from easydata.errors import ValidationFailed
from easydata.io.filesystems import join
from easydata.run.manifest import COMMIT_MARKER, MANIFEST_NAME, write_manifest
from easydata.run.output import commit_output, finish_commit, prepare_output, staging_dir
from easydata.reader import TokenReader
from tests.conftest import write_synthetic_output

L = 4
SCHEMA = pa.schema([(c, pa.list_(pa.int32())) for c in ("input_ids", "segment_ids", "positions")])


def rows(first: int, count: int) -> list[dict[str, list[int]]]:
    """Packed rows whose tokens name them: row `r` is `[r, r, r, r]`."""
    return [{"input_ids": [r] * L, "segment_ids": [1] * L, "positions": list(range(L))}
            for r in range(first, first + count)]


def write_output(out: Path, first: int, shards: int = 2, per_shard: int = 6) -> None:
    write_synthetic_output(str(out), {"web": [rows(first + s * per_shard, per_shard) for s in range(shards)]},
                           SCHEMA, fmt="arrow", seq_length=L)


def stage_replacement(out: Path, first: int, run_id: str,
                      shards: int = 3) -> tuple[str, list[tuple[str, str]], dict[str, Any]]:
    """A complete new output of 15 rows in `shards` shards, written into a run's staging dir:
    `(staging, moves, its manifest)`."""
    staging = staging_dir(str(out), run_id)
    bounds = np.linspace(0, 15, shards + 1).astype(int)
    manifest = write_synthetic_output(staging, {"web": [rows(first + a, b - a) for a, b in zip(bounds, bounds[1:])]},
                                      SCHEMA, fmt="arrow", seq_length=L)
    os.remove(join(staging, MANIFEST_NAME))
    moves = [(join(staging, shard["path"]), shard["path"]) for shard in manifest["datasets"]["web"]["shards"]]
    return staging, moves, manifest


def row_ids(reader: TokenReader) -> list[int]:
    return sorted(int(i) for batch in reader for i in batch["input_ids"][:, 0])


def reader(out: Path, **options: Any) -> TokenReader:
    return TokenReader(str(out), batch_size=3, shuffle=True, seed=1, num_epochs=1, drop_remainder=False,
                       process_index=0, process_count=1, **options)


def test_a_reader_starting_during_the_commit_waits_for_the_new_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_output(out, first=0)
    staging, moves, manifest = stage_replacement(out, first=1000, run_id="replace1")
    commit_output(str(out), staging, moves)  # old manifest gone, new shards in place, no manifest yet
    assert not (out / MANIFEST_NAME).exists() and (out / COMMIT_MARKER).exists()
    started, result = threading.Event(), {}

    def read() -> None:
        started.set()
        result["rows"] = row_ids(reader(out, commit_wait=30))

    thread = threading.Thread(target=read)
    thread.start()
    started.wait()
    thread.join(timeout=0.5)
    assert thread.is_alive()  # waiting for the manifest, not failing and not reading half an output
    write_manifest(str(out), manifest)
    finish_commit(str(out))
    thread.join(timeout=30)
    assert result["rows"] == list(range(1000, 1015))  # the whole new output
    assert not (out / COMMIT_MARKER).exists()


def test_a_commit_that_never_finishes_is_one_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_output(out, first=0)
    staging, moves, _ = stage_replacement(out, first=1000, run_id="died")
    commit_output(str(out), staging, moves)  # ... and the run dies before its manifest
    with pytest.raises(ValidationFailed) as info:
        reader(out, commit_wait=0.3)
    message = str(info.value)
    assert f"'{out}' is being replaced by run died (commit started " in message
    assert message.endswith(f"and has no {MANIFEST_NAME} yet after waiting 0.3 s; if that run died, rerun it")
    with pytest.raises(ValidationFailed, match="is being replaced by run died"):
        reader(out, commit_wait=0)  # no wait: the same error at once


@pytest.mark.parametrize("new_shards", [2, 3])  # 2: same file names, replaced by renames; 3: old files deleted
def test_a_reader_opened_before_the_overwrite_keeps_reading_the_old_output(tmp_path: Path, new_shards: int) -> None:
    out = tmp_path / "out"
    write_output(out, first=0)
    old = reader(out, prefetch=0)  # holds its shard files open from construction
    staging, moves, manifest = stage_replacement(out, first=1000, run_id="replace2", shards=new_shards)
    commit_output(str(out), staging, moves)
    write_manifest(str(out), manifest)
    finish_commit(str(out))
    assert row_ids(old) == list(range(12))  # every old row, none of the new ones
    assert row_ids(reader(out)) == list(range(1000, 1015))
    assert json.loads((out / MANIFEST_NAME).read_text())["totals"]["rows"] == 15


def test_debris_of_a_commit_counts_as_an_easydata_output(tmp_path: Path, monkeypatch) -> None:
    """A run that died after its staging was moved in (marker and shards, no manifest yet): the next run into
    the output finishes that commit from its journal (proved by the copy in its staging), then may replace it."""
    import easydata.run.output

    out = tmp_path / "out"
    write_output(out, first=0)
    staging, moves, manifest = stage_replacement(out, first=1000, run_id="died2")
    manifest["run"] = {"run_id": "died2"}

    def killed(*args: Any) -> None:
        raise OSError("killed before the manifest")

    with monkeypatch.context() as patch:
        patch.setattr(easydata.run.output, "write_manifest", killed)
        with pytest.raises(OSError, match="killed before the manifest"):
            commit_output(str(out), staging, moves, manifest)
    assert sorted(p.name for p in out.iterdir()) == [COMMIT_MARKER, ".easydata-tmp-died2", "web"]
    prepare_output(str(out), overwrite=True)  # no "not an easydata output" refusal: the commit is finished first
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "web"]
    assert json.loads((out / MANIFEST_NAME).read_text())["run"]["run_id"] == "died2"
    assert sorted(p.name for p in (out / "web").iterdir()) == sorted(Path(rel).name for _, rel in moves)
