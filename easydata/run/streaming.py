"""Streaming output: each event-time window becomes packed shards committed on its own, and
`manifest.json` always lists exactly the committed windows.

A window's shards are named `<name>/w<start>-p<pane>-part-<i>-of-<n>.<ext>` with the window start in
UTC as `YYYYmmddTHHMMSSZ`, so names sort by time and glob cleanly (no brackets, spaces or colons).
`commit_window` moves a window's staged files into place and rewrites the manifest (temporary name,
then rename) with the window appended: a reader sees the windows committed so far and never a window
half-written. The manifest has the batch layout (`datasets.<name>.shards`, totals, counters), so
`TokenReader` and `validate` read a growing output like any other, plus `streaming: true` and the
list of `windows`.

Pure code (fsspec, pyarrow), unit-tested without Beam; the Beam wiring is `transforms.stream`.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Optional

from easydata.io.filesystems import get_fs, join
from easydata.run.manifest import MANIFEST_NAME, build_manifest, read_manifest, write_manifest
from easydata.run.output import move_into_place
from easydata.io.sources import parse_json_record

__all__ = ["window_id", "parse_message", "commit_window"]


def window_id(start_seconds: float, pane: int = 0) -> str:
    """`w20261121T161500Z-p000`: sorts by window start, then firing."""
    start = _dt.datetime.fromtimestamp(start_seconds, tz=_dt.timezone.utc)
    return f"w{start:%Y%m%dT%H%M%S}Z-p{pane:03d}"


def parse_message(data: bytes, attributes: Optional[Mapping[str, str]] = None) -> tuple[Optional[dict], str]:
    """A Pub/Sub message as a record: its JSON object, with attributes added as fields it lacks.

    Returns:
      `(record, "")`, or `(None, reason)` for a message that is not a UTF-8 JSON object.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"invalid UTF-8 at byte {e.start}"
    record, problem = parse_json_record(text)
    if problem is not None:
        return None, problem
    if not isinstance(record, dict):
        return None, f"record is a {type(record).__name__}, not an object"
    for key, value in (attributes or {}).items():
        record.setdefault(key, value)
    return record, ""


def _empty_entry() -> dict[str, Any]:
    return {"shards": [], "documents_in": 0, "documents_written": 0, "documents_rejected": 0, "padding_tokens": 0}


def commit_window(output_dir: str, *, window: str, start: float, end: float, outputs: Mapping[str, Mapping[str, Any]],
                  moves: list[tuple[str, str]], rejected_files: list[str], base: Mapping[str, Any]) -> dict[str, Any]:
    """Commits one window: moves its staged files into place, then rewrites the manifest.

    Args:
      window: `window_id` of the window (and pane).
      start, end: the window's bounds (seconds since the epoch).
      outputs: per dataset: `shards` (`{path, rows, tokens, padding_tokens, bytes}`), `documents_in`,
        `documents_written`, `documents_rejected`, `padding_tokens`, `columns`, and `engine` where a
        fast tokenizer engine may have encoded it (its choice and `while_running` counts, as the
        manifest's `tokenizer_engines` entry of a batch job; added up over the windows).
      moves: `(staged path, path relative to output_dir)` of the window's files.
      rejected_files: relative paths of its dead-letter files.
      base: the manifest fields that do not change between windows (`config`, `fingerprint`,
        `tokenizer`, `schema`, `output_format`, `compression`).

    Returns:
      The manifest written. Committing a window already listed is a no-op (a retried bundle).
    """
    fs, root = get_fs(output_dir)
    previous = read_manifest(output_dir) if fs.exists(join(root, MANIFEST_NAME)) else None
    windows = list((previous or {}).get("windows", []))
    if any(w["id"] == window for w in windows):
        return previous
    move_into_place(output_dir, moves)
    datasets = {name: {k: (list(v) if k == "shards" else v) for k, v in entry.items()}
                for name, entry in ((previous or {}).get("datasets") or {}).items()}
    counts = {}
    for name, out in outputs.items():
        entry = datasets.setdefault(name, _empty_entry())
        entry["shards"] = [*entry["shards"], *out["shards"]]
        for key in ("documents_in", "documents_written", "documents_rejected", "padding_tokens"):
            entry[key] = int(entry.get(key, 0)) + int(out.get(key, 0))
        entry["columns"] = {**entry.get("columns", {}), **out.get("columns", {})}
        counts[name] = {key: out.get(key, 0) for key in ("documents_in", "documents_written", "documents_rejected")}
        counts[name]["tokens"] = sum(s["tokens"] for s in out["shards"])
        counts[name]["rows"] = sum(s["rows"] for s in out["shards"])
    windows.append({"id": window, "start": _iso(start), "end": _iso(end), "datasets": counts})
    for entry in datasets.values():  # derived again from the shards by build_manifest
        entry.pop("rows", None)
        entry.pop("tokens", None)
    schema = dict(base["schema"])
    schema["columns"] = {**((previous or {}).get("schema") or {}).get("columns", {}), **schema.get("columns", {})}
    manifest = build_manifest(config=dict(base["config"]), fingerprint=base["fingerprint"],
                              tokenizer=dict(base["tokenizer"]), schema=schema, datasets=datasets,
                              output_format=base["output_format"], compression=base["compression"],
                              rejected_files=sorted({*(previous or {}).get("rejected_files", []), *rejected_files}))
    engines = {**((previous or {}).get("tokenizer_engines") or {})}
    for name, out in outputs.items():
        if out.get("engine"):
            engines[name] = _add_engine(engines.get(name), out["engine"])
    if engines:
        manifest["tokenizer_engines"] = engines
    manifest["streaming"] = True
    manifest["windows"] = windows
    write_manifest(output_dir, manifest)
    return manifest


def _add_engine(total: Optional[Mapping[str, Any]], window: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset's `tokenizer_engines` entry with one more window's. The choice named is a fast engine's
    where any worker used one (`while_running` counts the windows fast engines encoded; a worker that
    chose `hf` wrote `hf`'s ids)."""
    keep = window if total is None or (total.get("name") == "hf" and window.get("name") != "hf") else total
    entry = {key: value for key, value in keep.items() if key != "while_running"}
    runs = [e["while_running"] for e in (total or {}, window) if e.get("while_running")]
    if runs:
        entry["while_running"] = {key: sum(int(r.get(key, 0)) for r in runs) for key in runs[0]}
    return entry


def _iso(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc).isoformat(timespec="seconds")
