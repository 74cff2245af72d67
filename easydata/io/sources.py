"""Reading input files into batches of documents, in splits that several workers can share.

`plan_splits` lists the files of a dataset and cuts them into `InputSplit`s of roughly
`target_bytes` (`split_size` picks it from the input size): byte ranges for uncompressed line formats (JSONL, line-mode text), row-group ranges
for Parquet, record-batch ranges for Arrow IPC files, and a few ranges of the decompressed bytes for a large
compressed line file (`input_formats.lines.compressed_ranges`); other compressed files, CSV, JSON arrays and
Arrow streams are one split each. `work_units` groups the splits one reader reads (whole small files
together), and `read_splits` turns them into `DocumentBatch`es of at most `batch_size` documents.

Every document gets a stable key `"<name>@<position>"`: the file's path relative to the directory
holding all of the dataset's files (see `key_names`), and the byte offset of the line for line
formats or the row index for tabular formats. It does not depend on how the input was split or
where the data lives (local or gs://), and it seeds the deterministic shuffle; adding files in a
new sibling directory moves that common directory and so reshuffles. Dead-letter records name the
full source path instead. Records that cannot become documents (malformed
JSON, invalid UTF-8, missing / non-string / empty content, too large) are returned as rejects with a
reason, never dropped.
"""

from __future__ import annotations

import posixpath
from typing import Iterator, NamedTuple, Optional, Sequence

from easydata.config import DatasetConfig
from easydata.errors import PROGRAMMING_ERRORS, InputError
from easydata.io.documents import (MAX_BATCH_CHARS, raise_unless_corrupt, DocumentBatch, DocumentCollector, InputSplit,
                                   Reject, collect_records, parse_json_record, unusable_value, lfs_pointer, LFS_POINTER)
from easydata.io.filesystems import compression_of, decompressed_size, file_facts, file_head, file_version, get_fs, \
    list_data_files, local_path
from easydata.io.data_directories import METADATA_FILES, dataset_files, infer_type
from easydata.io.input_formats import READERS, READ_SIZES, SPLITTERS, byte_ranges, compressed_parts, compressed_ranges

__all__ = ["InputSplit", "DocumentBatch", "Reject", "SplitPlan", "plan_splits", "plan_input", "read_split",
           "read_splits", "infer_type", "dataset_files", "METADATA_FILES", "total_input_bytes", "text_bytes", "key_names", "split_size", "DEFAULT_SPLITS", "MAX_BATCH_CHARS",
           "collect_records", "parse_json_record", "check_unchanged", "check_all_unchanged", "unusable_value", "work_units", "MAX_UNIT_FILES"]


#: Splits planned per dataset unless the caller says how many (a run asks for as many as keep this
#: machine's workers busy: `easydata.run.machine.splits_per_dataset`).
DEFAULT_SPLITS = 16

def split_size(total_bytes: int, *, minimum: int = 4 * 2**20, maximum: int = 64 * 2**20,
               splits_wanted: int = DEFAULT_SPLITS) -> int:
    """A split size giving about `splits_wanted` splits, within `[minimum, maximum]` bytes.

    Small inputs still get several splits, so several workers share them; large inputs get splits
    of at most `maximum`, a few seconds of tokenization each. A run asks for splits by this machine's
    cores, so a run resumed elsewhere may plan other splits: `--resume` then re-plans with the
    interrupted run's split size (`easydata.run.run_plan`).
    """
    return int(min(maximum, max(minimum, total_bytes // max(1, splits_wanted))))

class SplitPlan(NamedTuple):
    """A dataset's splits and the split size they were cut to (recorded so a resumed run can re-plan them)."""

    splits: list[InputSplit]
    split_bytes: int

def plan_splits(dataset: DatasetConfig, target_bytes: Optional[int] = None,
                exclude_dirs: tuple[str, ...] = (), splits_wanted: int = DEFAULT_SPLITS,
                readers: int = 1) -> list[InputSplit]:
    """Lists a dataset's files and cuts them into splits of about `target_bytes` (default: the
    dataset's total size over `splits_wanted`, see `split_size`); `plan_input` also says which size
    that was.

    With `num_rows` set, each file is one split so the first `num_rows` documents in input order can
    be taken; the limit itself is applied by the caller.

    Raises:
      InputError: for missing files, globs matching nothing, or unknown types.
    """
    return plan_input(dataset, target_bytes, exclude_dirs, splits_wanted, readers).splits

def plan_input(dataset: DatasetConfig, target_bytes: Optional[int] = None,
               exclude_dirs: tuple[str, ...] = (), splits_wanted: int = DEFAULT_SPLITS, readers: int = 1) -> SplitPlan:
    """`plan_splits`, with the split size used; files inside `exclude_dirs` (the run's output) are
    never inputs. `readers`: how many workers read at once; a large compressed line file is cut into
    parts for them (`input_formats.lines.compressed_parts`; 1: never), which a resumed run must plan alike."""
    if dataset.type == "huggingface":  # a Hub dataset id: its split's files, from the HF cache
        from easydata.io.hub import resolve_hub_dataset

        files, listed, directories = resolve_hub_dataset(str(dataset.data_files), dataset.split or "train"), {}, {}
    else:
        files, listed, directories = list_data_files(dataset.data_file_list, exclude_dirs)
    facts = {path: listed.get(path) or file_facts(path) for path in files}  # one look at each file
    files = dataset_files(dataset, files, directories, facts)
    names = key_names(files)
    seen: dict[str, str] = {}
    for path, name in names.items():
        if name in seen:
            raise InputError(f"dataset '{dataset.name}': '{seen[name]}' and '{path}' have the same name"
                             f" '{name}' (the same file listed twice, or one path on two filesystems)")
        seen[name] = path
    sizes = {path: facts[path][0] for path in files}
    versions = {path: facts[path][1] for path in files}
    dataset_bytes = sum(sizes.values())
    if target_bytes is None:
        target_bytes = split_size(dataset_bytes, splits_wanted=splits_wanted)
    splits: list[InputSplit] = []
    for path in files:
        kind = dataset.type if dataset.type not in (None, "huggingface") else infer_type(path)
        size = sizes[path]
        compressed = compression_of(path) is not None
        whole = (compressed or kind in ("csv", "json")
                 or (kind == "txt" and dataset.sample_by != "line") or dataset.num_rows is not None)
        by_line = kind == "jsonl" or (kind == "txt" and dataset.sample_by == "line")
        parts = compressed_parts(size, dataset_bytes, target_bytes, readers) \
            if compressed and by_line and dataset.num_rows is None else 1
        if parts > 1:
            ranges = compressed_ranges(path, size, parts)
        elif whole or size <= target_bytes:
            ranges = [(0, None, size)]
        elif kind in ("jsonl", "txt"):
            ranges = byte_ranges(size, target_bytes)
        else:
            try:
                ranges = SPLITTERS[kind](path, size, target_bytes)
            except PROGRAMMING_ERRORS:
                raise
            except Exception:  # an unreadable footer: one split, whose reading dead-letters the file
                ranges = [(0, None, size)]
        for start, end, part_size in ranges:
            splits.append(InputSplit(dataset=dataset.name, path=path, type=kind, start=start, end=end,
                                     index=len(splits), size=part_size, key_name=names[path],
                                     version=versions[path]))
    return SplitPlan(splits, target_bytes)

def key_names(files: list[str]) -> dict[str, str]:
    """Each file's path relative to the deepest directory holding all of them (`a.jsonl`, `sub/b.jsonl`)."""
    stripped = {f: f.split("://", 1)[-1] for f in files}
    if len(files) == 1:
        return {files[0]: posixpath.basename(stripped[files[0]])}
    try:
        root = posixpath.commonpath([posixpath.dirname(p) for p in stripped.values()])
    except ValueError:  # absolute and relative paths mixed: no common directory
        return stripped
    return {f: _relative(p, root or ".") for f, p in stripped.items()}


def _relative(path: str, root: str) -> str:
    """`posixpath.relpath(path, root)` (two `abspath`s a path, ~8 us: 100,000 files are keyed at once),
    sliced when `path` is a normalised path inside the normalised `root` with no `..` (which `relpath`
    resolves against the working directory, stopping at `/`) and no `//` (which POSIX keeps at the start)."""
    plain = ".." not in path and "//" not in path and "//" not in root and path == posixpath.normpath(path)
    if plain and root == posixpath.normpath(root):
        if root == ".":
            if not path.startswith("/"):
                return path
        elif path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1:]
    return posixpath.relpath(path, root)


def read_split(split: InputSplit, dataset: DatasetConfig, *, batch_size: int = 1000,
               max_document_bytes: Optional[int] = None, limit: Optional[int] = None,
               rejects: Optional[list[Reject]] = None, messages_field: str = "messages") -> Iterator[DocumentBatch]:
    """`read_splits` of one split."""
    return read_splits([split], dataset, batch_size=batch_size, max_document_bytes=max_document_bytes, limit=limit,
                       rejects=rejects, messages_field=messages_field)

def read_splits(splits: Sequence[InputSplit], dataset: DatasetConfig, *, batch_size: int = 1000,
                max_document_bytes: Optional[int] = None, limit: Optional[int] = None,
                rejects: Optional[list[Reject]] = None, messages_field: str = "messages",
                unbatched: Optional[list[int]] = None) -> Iterator[DocumentBatch]:
    """Yields the documents of `splits`, read in order, in batches that run on from one split to the next
    (a work unit of many small files gives full batches, not a batch per file); appends unusable records
    to `rejects`.

    Args:
      splits: what to read (a work unit: `work_units`).
      dataset: the dataset config (content field, additional fields, text mode).
      batch_size: documents per yielded batch.
      max_document_bytes: reject documents whose UTF-8 text is larger.
      limit: stop after this many records (documents + rejects) of all the splits.
      rejects: list receiving `Reject`s (a fresh list is used when None).
      messages_field: the field holding chat messages when the content field is absent.
      unbatched: list receiving the bytes read after the last batch's documents (records that were all
        rejected, an empty row group), which no batch carries: a caller counting what was read adds them.

    A file that cannot be opened or turns out corrupt or truncated part-way does not raise: the rest
    of its split becomes one dead letter saying why (the documents before it are kept) and the next
    split is read, so one bad file cannot end a long job; unreadable Parquet row groups are
    dead-lettered with their row count.
    """
    if not splits:
        return
    collector = DocumentCollector(dataset, "", "", batch_size, max_document_bytes, limit, messages_field)
    try:
        for split in splits:
            collector.source, collector.key_name = split.path, split.key_name or split.path  # its documents' keys
            collector.source_fields, collector.source_types = (), {}
            yield from _read_one(split, collector)
            # changed since planning (before or while it was read): what was read matches neither version. One
            # look, after: a look before too was a third request per file on an object store (with the open's),
            # and its documents cannot be committed either way, since the run ends here.
            check_unchanged(split.path, split.version)
            if collector.done:
                break
        batch = collector.flush()
        if batch is not None:
            yield batch
    finally:
        if rejects is not None:
            rejects.extend(collector.rejects)
        if unbatched is not None:
            unbatched.append(collector.pending_bytes)

def _read_one(split: InputSplit, collector: DocumentCollector) -> Iterator[DocumentBatch]:
    """The full batches of one split (what is left over stays in `collector`)."""
    consumed_total = 0
    try:
        for consumed in READERS[split.type](split, collector.ds, collector):
            consumed_total += consumed
            if collector.full or collector.done:
                batch = collector.flush(consumed)
                if batch is not None:
                    yield batch
                if collector.done:
                    return
            else:
                collector.pending_bytes += consumed
    except Exception as e:  # a corrupt or truncated file: dead-letter the rest of the split, go on
        raise_unless_corrupt(e, split.path, f"after {consumed_total} bytes of a split starting at {split.start}")
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        pointer = _lfs_pointer(split) if consumed_total == 0 else None
        message = f"{type(e).__name__}: {message}" if pointer is None else pointer
        byte_positions = split.type in ("jsonl", "txt", "json")  # else positions are rows
        position = split.start + consumed_total if byte_positions else -1
        compressed = compression_of(split.path) is not None
        # a table's reading counts its columns' uncompressed bytes, not the file's: only a file not read at all
        # says how much of it was not
        unread = None if compressed or not split.size or (split.type in READ_SIZES and consumed_total) \
            else max(split.size - consumed_total, 0)
        collector.reject(position, f"unreadable input after {consumed_total} bytes of this split"
                                   f" (starting at {split.start}): {message}"[:500],
                         read_bytes=consumed_total, unread_bytes=unread)

#: Git LFS pointer files are smaller than this (git-lfs's docs/spec.md).
MAX_LFS_POINTER_BYTES = 1024


def _lfs_pointer(split: InputSplit) -> Optional[str]:
    """Why the file of a split that could not be read is no data, when it is a Git LFS pointer (a Parquet,
    Arrow or compressed file was "not a readable Parquet file: magic bytes not found"); else None. Looked at
    only once a split's reading failed, so a good file costs nothing."""
    if split.start != 0 or split.size > MAX_LFS_POINTER_BYTES:
        return None
    try:
        return lfs_pointer(file_head(split.path, len(LFS_POINTER)))
    except OSError:
        return None

def check_unchanged(path: str, version: str) -> None:
    """Raises InputError when the file at `path` is no longer the `version` planning found (truncated,
    appended to, replaced): the run's output would match neither version of it. An empty `version` (none
    was found) checks nothing."""
    if not version:
        return
    try:
        now = file_version(path)
    except FileNotFoundError:
        now = "absent"
    if now != version:
        raise InputError(f"input '{path}' changed during the run ({version} -> {now}); its documents"
                         " would match neither version: rerun once it no longer changes")

#: Requests at once when `check_all_unchanged` looks at files on an object store.
CHECK_THREADS = 32


def check_all_unchanged(versions: dict[str, str], threads: int = CHECK_THREADS) -> None:
    """`check_unchanged` of every `path: version`: files on an object store whose fsspec file system is
    asynchronous (s3fs, gcsfs, adlfs, HTTP: made for concurrent requests) `threads` at a time (a request
    each: the commit step checked 100,000 objects one round trip after another), the others (local files: a
    `stat` each; FTP, SFTP: one connection) one after another. Raises the InputError of the first changed
    file checked one at a time, else of the first changed other one, in `versions`' order."""
    concurrent_protocols: dict[str, bool] = {}

    def concurrent(path: str) -> bool:
        if local_path(path) is not None:
            return False
        protocol = path.split("://", 1)[0]
        if protocol not in concurrent_protocols:
            concurrent_protocols[protocol] = bool(getattr(get_fs(path)[0], "async_impl", False))
        return concurrent_protocols[protocol]

    serial: list[tuple[str, str]] = []
    many: list[tuple[str, str]] = []
    for path, version in versions.items():
        (many if concurrent(path) else serial).append((path, version))
    for path, version in serial:
        check_unchanged(path, version)
    if not many:
        return
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(min(threads, len(many)), thread_name_prefix="easydata-check")
    try:
        for future in [pool.submit(check_unchanged, path, version) for path, version in many]:
            future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

#: Whole files at most in one work unit: each is opened on its own (a request to an object store).
MAX_UNIT_FILES = 256

def work_units(dataset: DatasetConfig, splits: list[InputSplit], split_bytes: int = 0) -> list[list[InputSplit]]:
    """The dataset's work units: the splits one reader reads in order, identified by their first split's
    index (the unit of reading, of checkpoints and of `--resume`).

    A split of a large file is a unit of its own. Consecutive whole files smaller than a unit's budget are
    read together, up to that many bytes and `MAX_UNIT_FILES` files: so that a dataset of many small files
    costs what one file of the same bytes costs (a unit per file was a tokenizer call, a checkpoint and a
    shuffle element per file). The budget is `split_bytes` (the plan's split size; 0: no grouping) and at
    most a `DEFAULT_SPLITS`th of the dataset's bytes, so that small files make at least as many units as
    `plan_splits` aims to cut a large file into, for parallel readers. With `num_rows`, one unit reads
    every split in order, to stop after the first `num_rows` documents. The same splits and `split_bytes`
    give the same units: a resumed run re-plans its splits with the interrupted run's size."""
    if dataset.num_rows is not None:
        return [splits] if splits else []
    unit_bytes = min(split_bytes, total_input_bytes(splits) // DEFAULT_SPLITS)
    units: list[list[InputSplit]] = []
    open_bytes: Optional[int] = None  # the last unit's bytes while it is one of small files; None: it is not
    for split in splits:
        small = split.start == 0 and split.end is None and split.size < unit_bytes
        if small and open_bytes is not None and open_bytes + split.size <= unit_bytes \
                and len(units[-1]) < MAX_UNIT_FILES:
            units[-1].append(split)
            open_bytes += split.size
        else:
            units.append([split])
            open_bytes = split.size if small else None
    return units

def total_input_bytes(splits: list[InputSplit]) -> int:
    """The bytes of the files the splits cover, compressed as they are (what split sizes are planned in)."""
    return sum(s.size for s in splits)


#: Files per kind (a codec, a table format) whose size of text `text_bytes` looks at (the largest), for the
#: rest's ratio.
RATIO_FILES = 8


def text_bytes(splits: list[InputSplit], dataset: DatasetConfig, messages_field: str = "messages") -> int:
    """The bytes the readers will count as consumed: a file's own size; a compressed file's decompressed size;
    a Parquet or Arrow file's uncompressed bytes of the columns `dataset` reads (`READ_SIZES`). The largest
    `RATIO_FILES` files of each codec and table format are looked at (a request or two each), the others taken
    at their ratio (a dataset of 100,000 `.gz` files is not opened at planning). What sizes a run's shuffle
    groups (a compressed file counted at its file size made groups several times the intended size) and its
    progress (which ended early or late when reading counted other bytes)."""
    total = 0
    by_kind: dict[str, dict[str, int]] = {}  # codec or table format -> file -> its splits' bytes
    for split in splits:
        kind = split.type if split.type in READ_SIZES else compression_of(split.path)
        if kind is None:
            total += split.size
        else:
            files = by_kind.setdefault(kind, {})
            files[split.path] = files.get(split.path, 0) + split.size

    def size_of(kind: str, path: str, size: int) -> int:
        if kind not in READ_SIZES:
            return decompressed_size(path, size)
        try:
            return READ_SIZES[kind](path, dataset, messages_field)
        except PROGRAMMING_ERRORS:
            raise
        except Exception:  # unreadable: counted at its size (reading dead-letters it)
            return size

    for kind, files in sorted(by_kind.items()):
        largest = sorted(files, key=lambda path: (-files[path], path))[:RATIO_FILES]
        looked = sum(files[path] for path in largest)
        ratio = sum(size_of(kind, path, files[path]) for path in largest) / max(looked, 1)
        total += int(round(sum(files.values()) * ratio))
    return total
