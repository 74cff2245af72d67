"""`manifest.json`: the record of what an output directory holds and how it was made.

The manifest is written last, after every shard is in place, so its presence means the output is
complete. It records the resolved config and its fingerprint, the tokenizer (with a content hash),
the schema, every shard with its row and token counts, and document counters that satisfy
`documents_in == documents_written + documents_rejected` per dataset and in total.

`Manifest` is its one model, versioned (`FORMAT_VERSION`): `Manifest.from_json` checks a JSON object's
version and structure once (`structure_problems`), so no reader meets a string where a count belongs;
`to_json` gives it back. Writers build it (`build_manifest`), everything that reads an output gets it
from `read_manifest`: the reader, `validate`, `stats`, `inspect`, the CLI summary, EasyData's API.
Typed views: `outputs` (`OutputEntry` with its `ShardEntry`s), `output(name)`, `schema`, `fingerprint`.
It is also the JSON object itself (a `dict`), as users of the Python API have always indexed it.

Example:
    manifest = read_manifest("out/")
    name, web = manifest.output()       # the only output, else ValueError naming them
    [shard.path for shard in web.shards]
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import posixpath
import time
from typing import Any, Iterable, Optional

from easydata.errors import InputError, ValidationFailed
from easydata.io.filesystems import get_fs, join, local_path, open_file, open_regular, special_file

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "COMMIT_MARKER", "PARTIAL_INPUTS", "Manifest", "OutputEntry", "ShardEntry",
           "build_manifest", "write_manifest",
           "read_manifest", "structure_problems", "member_path", "resolves_inside", "is_easydata_manifest", "owned_files", "packed_seq_length"]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
COMMIT_MARKER = ".easydata-committing"  # present while a run replaces the output (easydata.run.output)
#: Manifest key: per input dataset, the files read only in part (truncated or corrupt part-way).
PARTIAL_INPUTS = "partial_inputs"


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """One shard of an output, as its manifest lists it. `path` is relative to the output directory and not
    checked: pass it through `member_path` before opening it. `fields`: the whole JSON entry (`bytes`,
    a `bin` shard's `index_path`, ...)."""

    path: str
    rows: int
    tokens: int
    padding_tokens: int
    fields: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class OutputEntry:
    """One output (`datasets.<name>`): its shards and counters. `fields`: the whole JSON entry."""

    name: str
    shards: tuple[ShardEntry, ...]
    rows: int
    tokens: int
    documents_in: int
    documents_written: int
    documents_rejected: int
    fields: dict[str, Any]


class Manifest(dict):
    """`manifest.json` (see the module docstring): the JSON object, with its checks and typed views."""

    VERSION = FORMAT_VERSION

    @classmethod
    def from_json(cls, data: Any, where: str = MANIFEST_NAME) -> "Manifest":
        """The manifest a JSON value holds, checked: an easydata manifest of a version this code reads, with
        every field the tools and readers use of the right JSON type.

        Raises:
          ValidationFailed: naming `where` and the first problem (and how many more).
        """
        if not isinstance(data, dict) or "format_version" not in data:
            raise ValidationFailed(f"'{where}' is not an easydata manifest (no format_version)")
        version = data["format_version"]
        if not isinstance(version, int) or isinstance(version, bool):  # else `>` below raises TypeError
            raise ValidationFailed(f"'{where}' has an invalid format_version {version!r}")
        if version > FORMAT_VERSION:
            raise ValidationFailed(f"'{where}' has format_version {version}; this easydata reads up to"
                                   f" {FORMAT_VERSION}: upgrade easydata-beam")
        problems = structure_problems(data)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValidationFailed(f"'{where}' is malformed: {problems[0]}{more}")
        return cls(data)

    def to_json(self) -> dict[str, Any]:
        """The JSON object (what `write_manifest` writes)."""
        return dict(self)

    @property
    def outputs(self) -> dict[str, OutputEntry]:
        """Every output by name (`datasets`: a dataset's, `mixed`, `<dataset>/<split>`)."""
        return {name: _output_entry(name, entry) for name, entry in (self.get("datasets") or {}).items()}

    def output(self, name: Optional[str] = None, where: str = "the output") -> tuple[str, OutputEntry]:
        """The output `name`, or the only one when `name` is None.

        Raises:
          ValueError: an unknown name, or several outputs and no name (naming them).
        """
        outputs = self.outputs
        if name is None:
            if len(outputs) != 1:
                raise ValueError(f"'{where}' holds datasets {sorted(outputs)}: pass name= to choose one.")
            name = next(iter(outputs))
        if name not in outputs:
            raise ValueError(f"'{where}' has no dataset '{name}'; it has {sorted(outputs)}.")
        return name, outputs[name]

    @property
    def format(self) -> str:
        return self.get("format") or "parquet"

    @property
    def fingerprint(self) -> Optional[str]:
        return self.get("config_fingerprint")

    @property
    def columns(self) -> dict[str, str]:
        """The schema's columns (name -> Arrow type name), of every output."""
        return dict((self.get("schema") or {}).get("columns") or {})

    @property
    def packed(self) -> bool:
        return bool((self.get("schema") or {}).get("packed"))


def _output_entry(name: str, entry: dict[str, Any]) -> OutputEntry:
    shards = tuple(ShardEntry(path=s["path"], rows=int(s.get("rows") or 0), tokens=int(s.get("tokens") or 0),
                              padding_tokens=int(s.get("padding_tokens") or 0), fields=s)
                   for s in entry.get("shards") or [])
    return OutputEntry(name=name, shards=shards, rows=int(entry.get("rows") or 0), tokens=int(entry.get("tokens") or 0),
                       documents_in=int(entry.get("documents_in") or 0),
                       documents_written=int(entry.get("documents_written") or 0),
                       documents_rejected=int(entry.get("documents_rejected") or 0), fields=entry)


def member_path(output_dir: str, relative: Any, what: str = "path") -> str:
    """The location of a file a manifest names, which must lie inside the output directory.

    A manifest is data anyone may edit or forge: a shard path `../outside/x.parquet`, `/etc/passwd` or
    `gs://other/x` must never be opened as part of the output.

    Raises:
      ValidationFailed: for an absolute path, a URL, `..` components or anything but a relative path.
    """
    if not isinstance(relative, str) or not relative or "\\" in relative or "://" in relative or \
            relative.startswith("/") or "\x00" in relative:
        raise ValidationFailed(f"'{output_dir}': manifest {what} {relative!r} is not a relative path inside the"
                               " output; refusing to open it")
    normal = posixpath.normpath(relative)
    if normal == ".." or normal.startswith("../") or normal in (".", MANIFEST_NAME):
        raise ValidationFailed(f"'{output_dir}': manifest {what} {relative!r} points outside the output; refusing"
                               " to open it")
    path = join(output_dir, normal)
    if not resolves_inside(path, output_dir):
        raise ValidationFailed(f"'{output_dir}': manifest {what} {relative!r} is a symbolic link (or lies under"
                               " one) that leads outside the output; refusing to open it")
    return path


def packed_seq_length(output_dir: str, schema: dict[str, Any]) -> int:
    """A packed output's row length from its manifest's schema, checked: a forged or corrupt manifest's
    `seq_length` (absent, 10**15, a string) must not size an allocation.

    Raises:
      ValidationFailed: not an integer in [1, MAX_SEQ_LENGTH].
    """
    from easydata.config import MAX_SEQ_LENGTH

    value = schema.get("seq_length")
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_SEQ_LENGTH:
        raise ValidationFailed(f"'{output_dir}': manifest seq_length {str(value)[:30]} is not a packed row length"
                               f" in [1, {MAX_SEQ_LENGTH:,}]")
    return value


def resolves_inside(path: str, directory: str, *, strict: bool = True) -> bool:
    """`path` lies inside `directory` once `..` and, on local disks, symbolic links are resolved.

    Args:
      strict: `path` may not be `directory` itself.

    Object stores have no links: there the normalised paths are compared.
    """
    local, base = local_path(path), local_path(directory)
    if local is not None and base is not None:
        real, root = os.path.realpath(local), os.path.realpath(base)
    else:
        real, root = posixpath.normpath(get_fs(path)[1]), posixpath.normpath(get_fs(directory)[1])
    root = root.rstrip("/") or "/"
    return (not strict and real == root) or real.startswith(root.rstrip("/") + "/")


def is_easydata_manifest(manifest: Any) -> bool:
    """A manifest an easydata run wrote: a format version, a config fingerprint and a run id (batch) or the
    streaming flag. Anything else named `manifest.json` is a user's file."""
    if not isinstance(manifest, dict):
        return False
    version = manifest.get("format_version")
    run = manifest.get("run")
    return (isinstance(version, int) and not isinstance(version, bool) and isinstance(manifest.get("config_fingerprint"), str)
            and ((isinstance(run, dict) and isinstance(run.get("run_id"), str)) or manifest.get("streaming") is True))


def owned_files(manifest: dict[str, Any]) -> set[str]:
    """The relative paths of the files a run wrote, by its manifest: shards and the files beside them
    (`*_path`: a `bin` shard's index), dead letters and the manifest itself. Not checked: pass each
    through `member_path` before acting on it."""
    owned = {MANIFEST_NAME}
    for entry in (manifest.get("datasets") or {}).values():
        for shard in (entry.get("shards") or []) if isinstance(entry, dict) else []:
            if isinstance(shard, dict):
                owned.update(v for k, v in shard.items() if (k == "path" or k.endswith("_path")) and isinstance(v, str))
    owned.update(p for p in manifest.get("rejected_files") or [] if isinstance(p, str))
    return owned


def build_manifest(*, config: dict[str, Any], fingerprint: str, tokenizer: dict[str, Any],
                   schema: dict[str, Any], datasets: dict[str, dict[str, Any]], output_format: str,
                   compression: str, rejected_files: Iterable[str] = (), run: Optional[dict[str, Any]] = None,
                   tokenizers: Optional[dict[str, dict[str, Any]]] = None,
                   chat: Optional[dict[str, dict[str, Any]]] = None,
                   mix: Optional[dict[str, Any]] = None,
                   partial_inputs: Optional[dict[str, list[dict[str, Any]]]] = None) -> Manifest:
    """Assembles the manifest.

    Args:
      datasets: per output name: `shards` (list of `{path, rows, tokens}`), `documents_in`,
        `documents_written`, `documents_rejected`, `padding_tokens`.
      mix: a mix's plan and realized shares (`easydata.run.finalize`); its `target_weights` and
        `realized_token_share` are also put at the top level.
      partial_inputs: per input dataset, the files read only in part (`path`, `offset`, `read_bytes`,
        `unread_bytes` (None: unknown), `reason`); their unread rest is one dead letter each.
    """
    totals = {"rows": 0, "tokens": 0, "padding_tokens": 0, "documents_in": 0, "documents_written": 0,
              "documents_rejected": 0, "shards": 0}
    trained = [info["trained_tokens"] for info in datasets.values() if "trained_tokens" in info]
    outputs: dict[str, Any] = {}
    for name, info in sorted(datasets.items()):
        shards = info["shards"]
        entry = {
            "shards": shards,
            "rows": sum(s["rows"] for s in shards),
            "tokens": sum(s["tokens"] for s in shards),
            "padding_tokens": int(info.get("padding_tokens", 0)),
            "documents_in": int(info["documents_in"]),
            "documents_written": int(info["documents_written"]),
            "documents_rejected": int(info["documents_rejected"]),
        }
        entry.update({k: v for k, v in info.items() if k not in entry})  # e.g. packing statistics
        outputs[name] = entry
        for key in totals:
            totals[key] += len(shards) if key == "shards" else entry[key]
    manifest = Manifest({
        "format_version": FORMAT_VERSION,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": config,
        "config_fingerprint": fingerprint,
        "tokenizer": tokenizer,
        "schema": schema,
        "format": output_format,
        "compression": compression,
        "datasets": outputs,
        "totals": {**totals, **({"trained_tokens": sum(trained)} if trained else {})},
        "documents_in": totals["documents_in"],
        "documents_written": totals["documents_written"],
        "documents_rejected": totals["documents_rejected"],
        "rejected_files": sorted(rejected_files),
        PARTIAL_INPUTS: {name: entries for name, entries in sorted((partial_inputs or {}).items()) if entries},
    })
    if tokenizers:
        manifest["tokenizers"] = tokenizers
    if chat:
        manifest["chat"] = chat
    if mix:
        manifest["target_weights"] = mix["target_weights"]
        manifest["realized_token_share"] = mix["realized_token_share"]
        manifest["mix"] = mix
    if run:
        manifest["run"] = run
    return manifest


def write_manifest(output_dir: str, manifest: dict[str, Any]) -> str:
    """Writes `manifest.json` through a temporary name and a rename (atomic on local disks)."""
    fs, root = get_fs(output_dir)
    final = join(root, MANIFEST_NAME)
    temp = join(root, f".{MANIFEST_NAME}.tmp")
    with fs.open(temp, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    fs.mv(temp, final)
    return join(output_dir, MANIFEST_NAME)


def _commit_in_progress(output_dir: str) -> Optional[dict[str, Any]]:
    """The commit marker's content (`run_id`, `started_at`) while a run replaces the output, else None."""
    fs, root = get_fs(output_dir)
    try:
        with open_regular(fs, join(root, COMMIT_MARKER), "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (ValueError, OSError, InputError):
        return {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def structure_problems(manifest: Any) -> list[str]:
    """What in a manifest's shape the tools and readers cannot rely on: the JSON type of every field they
    read (datasets and their shards, counters, schema, tokenizer, format, mix and engine entries), a known
    output format, and `segment_ids` among a packed schema's columns. A manifest is data anyone may edit:
    this is checked once, when it is read (`read_manifest`), so no reader meets a string where a count
    belongs."""
    from easydata.config import OUTPUT_FORMATS

    if not isinstance(manifest, dict):
        return [f"the manifest is a JSON {type(manifest).__name__}, not an object"]
    found: list[str] = []

    def expect(where: str, value: Any, kind: Any, what: str, optional: bool = True) -> bool:
        if value is None and optional:
            return False
        if not (kind(value) if callable(kind) and not isinstance(kind, type) else isinstance(value, kind)):
            found.append(f"manifest {where} is {json.dumps(value)[:40] if _jsonable(value) else type(value).__name__},"
                         f" not {what}")
            return False
        return True

    counts = lambda v: _is_int(v) and v >= 0  # noqa: E731 - a predicate named once
    for key in ("documents_in", "documents_written", "documents_rejected"):
        expect(key, manifest.get(key), counts, "a count")
    if manifest.get("format") is not None and manifest.get("format") not in OUTPUT_FORMATS:
        found.append(f"manifest format {str(manifest.get('format'))[:30]!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    expect("compression", manifest.get("compression"), str, "a codec name")
    if expect("totals", manifest.get("totals"), dict, "an object"):
        for key, value in manifest["totals"].items():
            expect(f"totals.{key}", value, counts, "a count")
    if expect("tokenizer", manifest.get("tokenizer"), dict, "an object"):
        for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id"):
            expect(f"tokenizer.{key}", manifest["tokenizer"].get(key), counts, "a token id or size")
    schema = manifest.get("schema")
    if expect("schema", schema, dict, "an object"):
        columns = schema.get("columns")
        if expect("schema.columns", columns, dict, "an object of column types"):
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in columns.items()):
                found.append("manifest schema.columns must map column names to type names")
        expect("schema.packed", schema.get("packed"), bool, "true or false")
        if schema.get("packed") is True and isinstance(columns, dict) and "segment_ids" not in columns:
            found.append("manifest schema is packed but its columns hold no segment_ids")
    if expect("datasets", manifest.get("datasets"), dict, "an object of datasets"):
        for name, entry in manifest["datasets"].items():
            where = f"datasets.{str(name)[:40]}"
            if not expect(where, entry, dict, "an object"):
                continue
            for key in ("rows", "tokens", "padding_tokens", "documents_in", "documents_written", "documents_rejected"):
                expect(f"{where}.{key}", entry.get(key), counts, "a count")
            if not expect(f"{where}.shards", entry.get("shards"), list, "a list of shards"):
                continue
            for i, shard in enumerate(entry["shards"]):
                if not expect(f"{where}.shards[{i}]", shard, dict, "an object"):
                    continue
                expect(f"{where}.shards[{i}].path", shard.get("path"), str, "a path", optional=False)
                for key in ("rows", "tokens", "padding_tokens"):
                    expect(f"{where}.shards[{i}].{key}", shard.get(key), counts, "a count")
    for key in ("mix", "tokenizer_engines", PARTIAL_INPUTS, "run", "shuffle", "splits", "chat", "tokenizers"):
        expect(key, manifest.get(key), dict, "an object")
    for key in ("tokenizer_engines", PARTIAL_INPUTS, "tokenizers"):
        for name, entry in (manifest.get(key) or {}).items() if isinstance(manifest.get(key), dict) else ():
            expect(f"{key}.{str(name)[:40]}", entry, list if key == PARTIAL_INPUTS else dict,
                   "a list" if key == PARTIAL_INPUTS else "an object")
            if key == PARTIAL_INPUTS and isinstance(entry, list):
                for item in entry:
                    expect(f"{key}.{str(name)[:40]}[]", item, dict, "an object")
    if expect("rejected_files", manifest.get("rejected_files"), list, "a list of paths"):
        if not all(isinstance(p, str) for p in manifest["rejected_files"]):
            found.append("manifest rejected_files must list paths")
    mix = manifest.get("mix")
    if isinstance(mix, dict) and expect("mix.sources", mix.get("sources"), dict, "an object"):
        for name, source in mix["sources"].items():
            expect(f"mix.sources.{str(name)[:40]}", source, dict, "an object")
    return found


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError, RecursionError):
        return False


def read_manifest(output_dir: str, wait_for_commit: float = 0.0) -> Manifest:
    """Loads the manifest of an output directory (`Manifest.from_json`: version and structure checked).

    Args:
      wait_for_commit: while a run is replacing the output (its commit marker is present, the old
        manifest already gone), wait up to this many seconds for the new manifest.

    Raises:
      ValidationFailed: when there is no manifest (an incomplete or foreign directory, or a commit
        that did not finish within `wait_for_commit`) or it is corrupt.
    """
    path = join(output_dir, MANIFEST_NAME)
    kind = special_file(path)
    if kind is not None:
        raise ValidationFailed(f"'{path}' is {kind}, not a manifest file; refusing to read it")
    deadline = time.monotonic() + wait_for_commit
    while True:
        try:
            with open_file(path, "rb", decompress=False) as f:
                manifest = json.load(f)
            break
        except (FileNotFoundError, InputError):
            commit = _commit_in_progress(output_dir)
            if commit is None:
                raise ValidationFailed(f"'{output_dir}' has no {MANIFEST_NAME}: not an easydata output, or a run"
                                       " that did not finish") from None
            if time.monotonic() >= deadline:
                started = commit.get("started_at")
                since = _dt.datetime.fromtimestamp(started, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") \
                    if isinstance(started, (int, float)) else "an unknown time"
                waited = f" after waiting {wait_for_commit:g} s" if wait_for_commit else ""
                raise ValidationFailed(
                    f"'{output_dir}' is being replaced by run {commit.get('run_id', '?')} (commit started {since})"
                    f" and has no {MANIFEST_NAME} yet{waited}; if that run died, rerun it") from None
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        except (ValueError, OSError) as e:
            raise ValidationFailed(f"'{path}' is not a readable JSON manifest: {e}") from None
        except RecursionError:
            raise ValidationFailed(f"'{path}' is not a manifest: its JSON is nested too deeply") from None
    return Manifest.from_json(manifest, path)
