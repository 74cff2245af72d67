"""Standalone copies of one output of a run: EasyData's per-dataset `save_path`.

`export_dataset(run_dir, name, dest)` makes `dest` an easydata output of its own holding only
`name`: its shards at the top level of `dest` (`dest/part-00000-of-00004.parquet`, what
`ParquetShardedSource("dest/*.parquet")` lists) and a manifest describing just them, so the
readers, `validate` and `inspect` work on it as on any output. Local shards are hard-linked when
the file system allows (no copy), otherwise copied through fsspec. The manifest is written last,
so `dest` only counts as an output once every shard is in place; running the export again
replaces the same files (safe to retry).
"""

from __future__ import annotations

import copy
import os
import posixpath
from typing import Any

from easydata.errors import OutputError
from easydata.io.filesystems import get_fs, join, local_path
from easydata.run.manifest import MANIFEST_NAME, member_path, read_manifest, write_manifest

__all__ = ["export_dataset"]


def _place(source: str, target: str) -> None:
    src, dst = local_path(source), local_path(target)
    if src is not None and dst is not None:
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        if os.path.exists(dst):
            os.remove(dst)
        try:
            os.link(src, dst)
            return
        except OSError:  # another device, or links not allowed: copy
            pass
    fs_src, inner_src = get_fs(source)
    fs_dst, inner_dst = get_fs(target)
    fs_dst.makedirs(posixpath.dirname(inner_dst) or inner_dst, exist_ok=True)
    with fs_src.open(inner_src, "rb") as fin, fs_dst.open(inner_dst, "wb") as fout:
        while chunk := fin.read(8 << 20):
            fout.write(chunk)


def export_dataset(run_dir: str, name: str, dest: str, *, overwrite: bool = False) -> dict[str, Any]:
    """Writes output `name` of the committed run in `run_dir` as a standalone output in `dest`.

    Raises:
      OutputError: `dest` already holds another output and `overwrite` is false, or `name` is not
        an output of the run.
    """
    manifest = read_manifest(run_dir)
    entry = (manifest.get("datasets") or {}).get(name)
    if entry is None:
        raise OutputError(f"'{run_dir}' has no output {name!r} to save (it has {sorted(manifest.get('datasets', {}))})")
    fs, inner = get_fs(dest)
    if fs.exists(join(inner, MANIFEST_NAME)):
        existing = read_manifest(dest)
        same = existing.get("config_fingerprint") == manifest.get("config_fingerprint") and \
            list(existing.get("datasets", {})) == [name]
        if same and existing.get("created_at") == manifest.get("created_at"):
            return existing  # this very export is already in place
        if not overwrite and not same:
            raise OutputError(f"save_path '{dest}' already holds another output; set overwrite=True in"
                              " SaveStageConfig or choose another save_path")
    exported = copy.deepcopy(entry)
    for shard in exported["shards"]:
        source = member_path(run_dir, shard["path"], "shard path")
        shard["path"] = posixpath.basename(shard["path"])
        _place(source, join(dest, shard["path"]))
    out = {**copy.deepcopy(manifest), "datasets": {name: exported}, "rejected_files": [],
           "exported_from": {"output": run_dir, "name": name}}
    totals = {key: exported.get(key, 0) for key in ("rows", "tokens", "padding_tokens", "documents_in",
                                                     "documents_written", "documents_rejected")}
    totals["shards"] = len(exported["shards"])
    if "trained_tokens" in exported:
        totals["trained_tokens"] = exported["trained_tokens"]
    out["totals"] = totals
    out.update({key: totals[key] for key in ("documents_in", "documents_written", "documents_rejected")})
    if name != "mixed":
        for key in ("mix", "target_weights", "realized_token_share"):
            out.pop(key, None)
    write_manifest(dest, out)
    return out
