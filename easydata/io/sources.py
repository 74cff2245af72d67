"""Reading input files into batches of documents, in splits that several workers can share.

`plan_splits` lists the files of a dataset and cuts them into `InputSplit`s of roughly
`target_bytes` (`split_size` picks it from the input size): byte ranges for uncompressed line formats (JSONL, line-mode text), row-group ranges
for Parquet, record-batch ranges for Arrow IPC files; compressed files, CSV, JSON arrays and Arrow
streams are one split each. `read_split` turns one split into `DocumentBatch`es of at most
`batch_size` documents.

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

import dataclasses
import io
import json
import os
import posixpath
import re
from typing import Any, Iterator, NamedTuple, Optional

from easydata.text.chat import ChatError, conversation_from_record
from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.filesystems import compression_of, expand_data_files, file_size, file_version, open_arrow_file, \
    open_file, strip_compression
from easydata.io.record_format import FormatError

__all__ = ["InputSplit", "DocumentBatch", "Reject", "SplitPlan", "plan_splits", "plan_input", "read_split",
           "infer_type", "total_input_bytes", "key_names", "split_size", "DEFAULT_SPLITS", "MAX_BATCH_CHARS",
           "collect_records", "parse_json_record", "check_unchanged"]

_EXTENSION_TYPES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
                    ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".csv": "csv", ".tsv": "csv",
                    ".txt": "txt", ".text": "txt", ".md": "txt"}
_EXCERPT_CHARS = 200
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark
# A batch closes at `batch_size` documents or this many characters of text, whichever comes first.
MAX_BATCH_CHARS = 4 * 2**20


@dataclasses.dataclass(frozen=True)
class InputSplit:
    """A contiguous piece of one input file.

    Attributes:
      dataset: name of the dataset it belongs to.
      path: the file (local path or URL).
      type: input format.
      start, end: byte range for line formats, row-group / record-batch range for Parquet / Arrow;
        `end` None means "to the end of the file".
      index: position of this split in the dataset's split list (names its dead-letter file).
      size: approximate bytes covered, for progress reporting.
      key_name: the file's name in document keys: its path relative to the dataset's common
        directory, so keys (and the shuffle) do not change when the data moves (local -> gs://).
      version: what the file was at planning (`easydata.io.filesystems.file_version`: size and
        modification time, or the object's generation); reading checks it (`check_unchanged`). Empty:
        not checked.
    """

    dataset: str
    path: str
    type: str
    start: int = 0
    end: Optional[int] = None
    index: int = 0
    size: int = 0
    key_name: str = ""
    version: str = ""


@dataclasses.dataclass
class Reject:
    """A record that could not become a document, with where it came from and why."""

    dataset: str
    source: str
    position: int
    reason: str
    excerpt: str = ""
    records: int = 1  # input records this rejection stands for (all rows of an unreadable row group)
    # Set when the rest of a split could not be read (a truncated or corrupt file): how many bytes of the
    # split were read before the damage, and how many were left unread (None: unknown, e.g. a compressed
    # stream cut short, whose missing part never arrived).
    read_bytes: Optional[int] = None
    unread_bytes: Optional[int] = None

    @property
    def partial_input(self) -> bool:
        """This dead letter stands for the unread rest of a file."""
        return self.read_bytes is not None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if not self.partial_input:
            del data["read_bytes"], data["unread_bytes"]
        return data

    def partial_entry(self) -> dict[str, Any]:
        """The manifest's record of a file read only in part (`partial_inputs`)."""
        return {"path": self.source, "offset": self.position, "read_bytes": self.read_bytes,
                "unread_bytes": self.unread_bytes, "reason": self.reason}


@dataclasses.dataclass
class DocumentBatch:
    """Documents of one dataset, column-wise.

    Attributes:
      dataset: dataset name.
      keys: stable `"<name>@<position>"` keys (see the module docstring).
      texts: document texts.
      fields: additional field name -> list of values, aligned with `texts`.
      input_bytes: raw input bytes consumed to produce this batch (for progress).
      conversations: for chat records, their `easydata.text.chat.Conversation` (its text is rendered by the
        chat stage); None for plain text documents; the whole list is None when there is no chat record.
      spans: after the chat stage, each document's trained character spans (None: train every token).
      unit, index: the work unit (its first split's index) and the batch's number within it; they name
        the batch's checkpoint (`easydata.run.checkpoint`); -1 when not read by `ReadDocuments`.
      chat_rejected, chat_rejected_file: records of this batch the chat stage rejected, and the
        dead-letter file it wrote them to (kept in the checkpoint, so a resumed run counts them).
    """

    dataset: str
    keys: list[str]
    texts: list[str]
    fields: dict[str, list[Any]]
    input_bytes: int = 0
    conversations: Optional[list[Any]] = None
    spans: Optional[list[Optional[list[tuple[int, int]]]]] = None
    unit: int = -1
    index: int = -1
    chat_rejected: int = 0
    chat_rejected_file: Optional[str] = None

    def __len__(self) -> int:
        return len(self.texts)


def infer_type(path: str) -> str:
    """The input type implied by a file name (compression suffix ignored)."""
    _, ext = os.path.splitext(strip_compression(path).lower())
    if ext not in _EXTENSION_TYPES:
        raise InputError(f"cannot infer the input type of '{path}' from its extension; set the dataset's"
                         f" `type` ({', '.join(sorted(set(_EXTENSION_TYPES.values())))})")
    return _EXTENSION_TYPES[ext]


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
                exclude_dirs: tuple[str, ...] = (), splits_wanted: int = DEFAULT_SPLITS) -> list[InputSplit]:
    """Lists a dataset's files and cuts them into splits of about `target_bytes` (default: the
    dataset's total size over `splits_wanted`, see `split_size`); `plan_input` also says which size
    that was.

    With `num_rows` set, each file is one split so the first `num_rows` documents in input order can
    be taken; the limit itself is applied by the caller.

    Raises:
      InputError: for missing files, globs matching nothing, or unknown types.
    """
    return plan_input(dataset, target_bytes, exclude_dirs, splits_wanted).splits


def plan_input(dataset: DatasetConfig, target_bytes: Optional[int] = None,
               exclude_dirs: tuple[str, ...] = (), splits_wanted: int = DEFAULT_SPLITS) -> SplitPlan:
    """`plan_splits`, with the split size used; files inside `exclude_dirs` (the run's output) are
    never inputs."""
    if dataset.type == "huggingface":  # a Hub dataset id: its split's files, from the HF cache
        from easydata.io.hub import resolve_hub_dataset

        files = resolve_hub_dataset(str(dataset.data_files), dataset.split or "train")
    else:
        files = expand_data_files(dataset.data_file_list, exclude_dirs)
    names = key_names(files)
    seen: dict[str, str] = {}
    for path, name in names.items():
        if name in seen:
            raise InputError(f"dataset '{dataset.name}': '{seen[name]}' and '{path}' have the same name"
                             f" '{name}' (the same file listed twice, or one path on two filesystems)")
        seen[name] = path
    sizes = {path: file_size(path) for path in files}
    versions = {path: file_version(path) for path in files}
    if target_bytes is None:
        target_bytes = split_size(sum(sizes.values()), splits_wanted=splits_wanted)
    splits: list[InputSplit] = []
    for path in files:
        kind = dataset.type if dataset.type not in (None, "huggingface") else infer_type(path)
        size = sizes[path]
        whole = (compression_of(path) is not None or kind in ("csv", "json")
                 or (kind == "txt" and dataset.sample_by != "line") or dataset.num_rows is not None)
        if whole or size <= target_bytes:
            ranges = [(0, None, size)]
        elif kind in ("jsonl", "txt"):
            ranges = _equal_byte_ranges(size, target_bytes)
        else:
            try:
                ranges = _parquet_ranges(path, target_bytes) if kind == "parquet" else \
                    _arrow_ranges(path, size, target_bytes)
            except _PROGRAMMING_ERRORS:
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
    return {f: posixpath.relpath(p, root or ".") for f, p in stripped.items()}


def _open_table_file(path: str):
    """Parquet / Arrow inputs: native pyarrow files when uncompressed, decompressing streams otherwise."""
    return open_file(path) if compression_of(path) else open_arrow_file(path)


def _equal_byte_ranges(size: int, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    """`ceil(size / target_bytes)` contiguous ranges of equal size (within a byte), not full ranges
    and a remainder: local runners hand each worker a fixed share of the splits, so a small last
    split would leave one worker idle while the others finish theirs."""
    count = -(-size // target_bytes)
    bounds = [size * i // count for i in range(count + 1)]
    return [(start, end, end - start) for start, end in zip(bounds, bounds[1:])]


def _parquet_ranges(path: str, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    import pyarrow.parquet as pq

    with _open_table_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    ranges, start, acc = [], 0, 0
    for rg in range(meta.num_row_groups):
        acc += meta.row_group(rg).total_byte_size
        if acc >= target_bytes:
            ranges.append((start, rg + 1, acc))
            start, acc = rg + 1, 0
    if start < meta.num_row_groups or not ranges:
        ranges.append((start, meta.num_row_groups, acc))
    return ranges


def _arrow_ranges(path: str, size: int, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with _open_table_file(path) as f:
        try:
            n = ipc.open_file(f).num_record_batches
        except pa.ArrowInvalid:  # stream format (e.g. HF datasets cache files): not seekable
            return [(0, None, size)]
    per = max(1, int(n * target_bytes / max(size, 1)))
    return [(s, min(s + per, n), size * (min(s + per, n) - s) // max(n, 1)) for s in range(0, n, per)] or \
        [(0, 0, 0)]


# ---- reading -------------------------------------------------------------------------------------


class _Collector:
    """Accumulates records into `DocumentBatch`es and rejects into a list."""

    def __init__(self, dataset: DatasetConfig, source: str, key_name: str, batch_size: int,
                 max_document_bytes: Optional[int], limit: Optional[int], messages_field: str = "messages"):
        self.ds, self.source, self.key_name, self.batch_size = dataset, source, key_name, batch_size
        self.messages_field = messages_field
        self.formatter = dataset.record_formatter()
        self.max_bytes, self.limit = max_document_bytes, limit
        self.rejects: list[Reject] = []
        self.count = 0
        self.pending_bytes = 0
        self._reset()

    def _reset(self) -> None:
        self.keys: list[str] = []
        self.texts: list[str] = []
        self.text_chars = 0
        self.conversations: Optional[list[Any]] = None
        self.fields: dict[str, list[Any]] = {f: [] for f in self.ds.additional_fields}

    @property
    def full(self) -> bool:
        # Bounded by bytes too: a batch of long documents would otherwise hold several GB of tokenizer
        # output at once.
        return len(self.texts) >= self.batch_size or self.text_chars >= MAX_BATCH_CHARS

    @property
    def done(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def reject(self, position: int, reason: str, excerpt: Any = "", records: int = 1, *,
               read_bytes: Optional[int] = None, unread_bytes: Optional[int] = None) -> None:
        if self.done:
            return
        self.count += records
        text = excerpt if isinstance(excerpt, str) else _excerpt(excerpt)
        self.rejects.append(Reject(self.ds.name, self.source, position, reason, text[:_EXCERPT_CHARS], records,
                                   read_bytes, unread_bytes))

    def add_record(self, position: int, record: Any) -> None:
        """Adds one parsed structured record: an object whose content field holds a string (a text
        document) or a list of messages (a chat record; also the `messages_field`, or a
        `prompt`/`completion` pair)."""
        if self.done:
            return
        if not isinstance(record, dict):
            return self.reject(position, f"record is a {type(record).__name__}, not an object", record)
        if self.formatter is not None:
            try:
                record = self.formatter(record)
            except FormatError as e:
                return self.reject(position, str(e), record)
        for name in (self.ds.content_field, self.messages_field, "prompt", "completion", *self.ds.additional_fields):
            problem = unusable_value(record[name], f"field '{name}'") if name in record else None
            if problem:
                return self.reject(position, problem, record)
        text = record.get(self.ds.content_field, record.get(self.messages_field))
        is_pair = text is None and isinstance(record.get("prompt"), str) and isinstance(record.get("completion"), str)
        if isinstance(text, list) or is_pair:
            try:
                conversation = conversation_from_record(text, record)
            except ChatError as e:
                return self.reject(position, str(e), record)
            return self._accept_conversation(position, conversation, record)
        if self.ds.content_field not in record:
            return self.reject(position, f"missing content field '{self.ds.content_field}'", record)
        if not isinstance(text, str):
            return self.reject(position, f"content field '{self.ds.content_field}' is a"
                               f" {type(text).__name__}, not a string", record)
        self._accept(position, text, record)

    def _accept_conversation(self, position: int, conversation: Any, record: dict[str, Any]) -> None:
        if self.conversations is None:
            self.conversations = [None] * len(self.texts)
        self.count += 1
        self.keys.append(f"{self.key_name}@{position}")
        self.texts.append("")  # rendered by the chat stage
        self.conversations.append(conversation)
        for f in self.fields:
            self.fields[f].append(record.get(f))

    def add_text(self, position: int, text: str) -> None:
        """Adds one plain-text document (text input: no fields but the content field)."""
        if self.formatter is not None:
            return self.add_record(position, {self.ds.content_field: text})
        if not self.done:
            self._accept(position, text, None)

    def _accept(self, position: int, text: str, record: Optional[dict[str, Any]]) -> None:
        if not text.strip():
            return self.reject(position, "empty text", text)
        if self.max_bytes is not None and len(text) * 4 > self.max_bytes and \
                len(text.encode("utf-8")) > self.max_bytes:
            return self.reject(position, f"document is larger than max_document_bytes={self.max_bytes}", text)
        self.count += 1
        self.keys.append(f"{self.key_name}@{position}")
        self.texts.append(text)
        self.text_chars += len(text)
        if self.conversations is not None:
            self.conversations.append(None)
        for f in self.fields:
            self.fields[f].append(record.get(f) if record is not None else None)

    def flush(self, input_bytes: int = 0) -> Optional[DocumentBatch]:
        self.pending_bytes += input_bytes
        if not self.texts:
            return None
        batch = DocumentBatch(self.ds.name, self.keys, self.texts, self.fields, self.pending_bytes,
                              conversations=self.conversations)
        self.pending_bytes = 0
        self._reset()
        return batch


def collect_records(dataset: DatasetConfig, source: str, key_name: str,
                    records: list[tuple[int, Optional[dict[str, Any]], str, str]], *,
                    max_document_bytes: Optional[int] = None,
                    messages_field: str = "messages") -> tuple[Optional[DocumentBatch], list[Reject]]:
    """One batch of documents from records parsed elsewhere (a streaming window's messages), with the
    same checks as files get.

    Args:
      records: `(position, record, reason, excerpt)`; a record of None is rejected with `reason`.

    Returns:
      The batch (None when no record became a document) and the rejects.
    """
    collector = _Collector(dataset, source, key_name, len(records) + 1, max_document_bytes, None, messages_field)
    for position, record, reason, excerpt in records:
        if record is None:
            collector.reject(position, reason, excerpt)
        else:
            collector.add_record(position, record)
    return collector.flush(), list(collector.rejects)


# Bugs, not bad input: these are never turned into dead letters.
_PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, KeyError, IndexError, AssertionError, RecursionError,
                       MemoryError, NotImplementedError)


def read_split(split: InputSplit, dataset: DatasetConfig, *, batch_size: int = 1000,
               max_document_bytes: Optional[int] = None, limit: Optional[int] = None,
               rejects: Optional[list[Reject]] = None, messages_field: str = "messages") -> Iterator[DocumentBatch]:
    """Yields the documents of one split in batches; appends unusable records to `rejects`.

    Args:
      split: what to read.
      dataset: the dataset config (content field, additional fields, text mode).
      batch_size: documents per yielded batch.
      max_document_bytes: reject documents whose UTF-8 text is larger.
      limit: stop after this many records (documents + rejects).
      rejects: list receiving `Reject`s (a fresh list is used when None).
      messages_field: the field holding chat messages when the content field is absent.

    A file that cannot be opened or turns out corrupt or truncated part-way does not raise: the rest
    of the split becomes one dead letter saying why (the documents before it are kept), so one bad
    file cannot end a long job; unreadable Parquet row groups are dead-lettered with their row count.
    """
    check_unchanged(split)
    collector = _Collector(dataset, split.path, split.key_name or split.path, batch_size, max_document_bytes,
                           limit, messages_field)
    readers = {"jsonl": _read_lines, "txt": _read_lines, "json": _read_json, "csv": _read_csv,
               "parquet": _read_parquet, "arrow": _read_arrow}
    consumed_total = 0
    try:
        try:
            for consumed in readers[split.type](split, dataset, collector):
                consumed_total += consumed
                if collector.full or collector.done:
                    batch = collector.flush(consumed)
                    if batch is not None:
                        yield batch
                    if collector.done:
                        break
                else:
                    collector.pending_bytes += consumed
        except _PROGRAMMING_ERRORS:
            raise
        except Exception as e:  # a corrupt or truncated file: dead-letter the rest of the split, go on
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            byte_positions = split.type in ("jsonl", "txt", "json")  # else positions are rows
            position = split.start + consumed_total if byte_positions else -1
            compressed = compression_of(split.path) is not None
            unread = None if compressed or not split.size else max(split.size - consumed_total, 0)
            collector.reject(position, f"unreadable input after {consumed_total} bytes of this split"
                                       f" (starting at {split.start}): {type(e).__name__}: {message}"[:500],
                             read_bytes=consumed_total, unread_bytes=unread)
        check_unchanged(split)  # changed while being read: what was read matches neither version
        batch = collector.flush()
        if batch is not None:
            yield batch
    finally:
        if rejects is not None:
            rejects.extend(collector.rejects)


def check_unchanged(split: InputSplit) -> None:
    """Raises InputError when the split's file is not what it was at planning (truncated, appended to,
    replaced): the run's output would match neither version of it."""
    if not split.version:
        return
    try:
        now = file_version(split.path)
    except FileNotFoundError:
        now = "absent"
    if now != split.version:
        raise InputError(f"input '{split.path}' changed during the run ({split.version} -> {now}); its documents"
                         " would match neither version: rerun once it no longer changes")


def _excerpt(value: Any) -> str:
    """The start of a record for a dead letter (a deeply nested one cannot be `repr`-ed whole)."""
    try:
        return repr(value)[:_EXCERPT_CHARS]
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"


def parse_json_record(text: str) -> tuple[Any, Optional[str]]:
    """`(record, None)`, or `(None, reason)` for text that is not one JSON value (malformed, nested so
    deeply that the parser would exhaust the stack, or an integer too long to convert: Python refuses
    more than 4,300 digits): bad input, never a crash, and it costs only its own record."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"malformed JSON: {e.msg} at column {e.colno}"
    except RecursionError:
        return None, "malformed JSON: nested too deeply"
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        return None, f"unusable JSON number: {str(e).split(';')[0]}"


_INT64 = (-2**63, 2**63 - 1)
_SURROGATE = re.compile("[\ud800-\udfff]")


def unusable_value(value: Any, where: str) -> Optional[str]:
    """Why a value a document carries cannot be stored, else None: an integer outside int64 (JSON allows
    any; no Arrow column holds it) or text with a lone UTF-16 surrogate (a JSON `\\ud800` escape; no
    UTF-8 text holds one). Nested values are walked without recursion."""
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                return f"{where} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape)"
        elif isinstance(value, int) and not isinstance(value, bool):
            if not _INT64[0] <= value <= _INT64[1]:
                return f"{where} holds an integer outside the int64 range"
        elif isinstance(value, dict):
            stack.extend(value.values())
            stack.extend(k for k in value if isinstance(k, str))
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return None


def _line_cap(max_bytes: Optional[int]) -> int:
    """Bytes of one input line read at most: a document's JSON line may escape each character to up
    to 6 bytes (`\\uXXXX`); a longer line is rejected unread, so one huge line cannot fill memory."""
    return -1 if max_bytes is None else 6 * max_bytes + (1 << 16)


def _sized_lines(f: Any) -> Any:
    """`f`, or `f` buffered where its `readline` takes no size (fsspec's remote files): every line read
    here is read in bounded pieces."""
    try:
        f.readline(0)  # reads nothing
    except TypeError:
        return io.BufferedReader(f)
    return f


def _bounded_lines(f: Any, cap: int) -> Iterator[tuple[bytes, int]]:
    """`(line, 0)` for every line of `f`, or `(its first cap bytes, bytes skipped)` for a longer one
    (`f` as `_sized_lines` gives it)."""
    if cap < 0:
        for raw in f:
            yield raw, 0
        return
    while True:
        raw = f.readline(cap)
        if not raw:
            return
        skipped = 0
        if len(raw) == cap and not raw.endswith(b"\n"):
            while True:  # the rest of an overlong line, in bounded pieces
                more = f.readline(1 << 20)
                skipped += len(more)
                if not more or more.endswith(b"\n"):
                    break
        yield raw, skipped


def _read_lines(split: InputSplit, dataset: DatasetConfig, out: _Collector) -> Iterator[int]:
    """JSONL and text: lines whose first byte lies in [start, end); a UTF-8 BOM opening the file is
    encoding, not text, and is dropped."""
    is_json = split.type == "jsonl"
    if split.type == "txt" and dataset.sample_by != "line":
        yield from _read_text_whole(split, dataset, out)
        return
    cap = _line_cap(out.max_bytes)
    with open_file(split.path) as opened:
        f = _sized_lines(opened)
        position = split.start
        if split.start > 0:
            f.seek(split.start - 1)
            position = split.start - 1 + _skip_line(f)  # the rest of a line that belongs to the previous split
        for raw, skipped in _bounded_lines(f, cap):
            if split.end is not None and position >= split.end:
                break
            line_pos, position = position, position + len(raw) + skipped
            if line_pos == 0 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            stripped = raw.strip()
            if skipped:
                out.reject(line_pos, f"line of {len(raw) + skipped} bytes is larger than max_document_bytes="
                                     f"{out.max_bytes} allows (not read)", stripped[:_EXCERPT_CHARS].decode("utf-8", "replace"))
            elif stripped:
                try:
                    text = stripped.decode("utf-8")
                except UnicodeDecodeError as e:
                    out.reject(line_pos, f"invalid UTF-8 at byte {e.start}", stripped.decode("utf-8", "replace"))
                else:
                    if is_json:
                        record, problem = parse_json_record(text)
                        if problem is not None:
                            out.reject(line_pos, problem, text)
                        else:
                            out.add_record(line_pos, record)
                    else:
                        out.add_text(line_pos, text)
            yield len(raw) + skipped
            if out.done:
                return


def _skip_line(f: Any) -> int:
    """Reads past the end of the current line in bounded pieces (a split may start inside a 1 GB line);
    returns the bytes skipped."""
    skipped = 0
    while True:
        piece = f.readline(1 << 20)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped


def _read_text_whole(split: InputSplit, dataset: DatasetConfig, out: _Collector) -> Iterator[int]:
    """A text file as one document (`sample_by: document`) or as paragraphs. A document over
    `max_document_bytes` is rejected after reading only that many bytes of it (and counting the rest in
    bounded pieces), so a 1 GB file never sits in memory whole."""
    with open_file(split.path) as f:
        if dataset.sample_by == "document" and out.max_bytes is not None:
            data = f.read(out.max_bytes + len(_BOM) + 1)
            if len(data) > out.max_bytes + (len(_BOM) if data.startswith(_BOM) else 0):
                size = len(data)
                while piece := f.read(1 << 20):
                    size += len(piece)
                out.reject(0, f"document of {size:,} bytes is larger than max_document_bytes={out.max_bytes} allows"
                              " (not read whole)", data[:_EXCERPT_CHARS].decode("utf-8", "replace"))
                yield size
                return
        else:
            data = f.read()
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        out.reject(0, f"invalid UTF-8 at byte {e.start}", data[:_EXCERPT_CHARS].decode("utf-8", "replace"))
        yield len(data)
        return
    if dataset.sample_by == "document":
        out.add_text(0, text)
        yield len(data)
        return
    position = 0
    for paragraph in text.split("\n\n"):
        if paragraph.strip():
            out.add_text(position, paragraph.strip("\n"))
        position += len(paragraph) + 2
        yield len(paragraph.encode("utf-8")) + 2


def _read_json(split: InputSplit, dataset: DatasetConfig, out: _Collector) -> Iterator[int]:
    """`.json`: a JSON array of objects (position = index), or JSON lines."""
    with open_file(split.path) as f:
        head = f.read(64)
    if not head.removeprefix(_BOM).lstrip().startswith(b"["):
        yield from _read_lines(dataclasses.replace(split, type="jsonl"), dataset, out)
        return
    with open_file(split.path) as f:
        data = f.read()
    try:
        records = json.loads(data.removeprefix(_BOM))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        out.reject(0, f"malformed JSON array: {reason}", data[:_EXCERPT_CHARS].decode("utf-8", "replace"))
        yield len(data)
        return
    per = len(data) // max(len(records), 1)
    for i, record in enumerate(records):
        out.add_record(i, record)
        yield per
        if out.done:
            return


def _columns_needed(dataset: DatasetConfig, available: list[str]) -> list[str]:
    wanted = [dataset.content_field, *dataset.additional_fields]
    formatter = dataset.record_formatter()
    if formatter is not None:
        if formatter.needs_all_columns:
            return list(available)
        wanted = formatter.source_columns(wanted)
    return [c for c in wanted if c in available]


def _emit_table_batch(batch: Any, first_row: Any, out: _Collector, dataset: DatasetConfig) -> None:
    """Feeds the rows of an Arrow record batch into the collector; `first_row` is the first row's
    position (the others follow it), or a list of every row's position."""
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    names = list(columns)
    positions = first_row if isinstance(first_row, list) else range(first_row, first_row + batch.num_rows)
    for i, position in zip(range(batch.num_rows), positions):
        out.add_record(position, {n: columns[n][i] for n in names})
        if out.done:
            return


def _reject_block(out: _Collector, block: str, row: int, rows: int, error: Exception) -> int:
    """Dead-letters the `rows` records of an unreadable block starting at `row`; returns the next row."""
    out.reject(row, f"unreadable {block} (rows {row}..{row + rows - 1}): {type(error).__name__}:"
                    f" {str(error).splitlines()[0] if str(error) else ''}"[:500], records=rows)
    return row + rows


def _read_parquet(split: InputSplit, dataset: DatasetConfig, out: _Collector) -> Iterator[int]:
    import pyarrow.parquet as pq

    with _open_table_file(split.path) as f:
        try:
            pf = pq.ParquetFile(f)
        except Exception as e:
            raise InputError(f"'{split.path}' is not a readable Parquet file: {e}") from None
        meta = pf.metadata
        end = meta.num_row_groups if split.end is None else split.end
        groups = list(range(split.start, end))
        row = sum(meta.row_group(g).num_rows for g in range(split.start))
        columns = _columns_needed(dataset, pf.schema_arrow.names)
        for g in groups:
            try:
                table = pf.read_row_group(g, columns=columns)
            except _PROGRAMMING_ERRORS:
                raise
            except Exception as e:  # a corrupt row group: its rows are dead letters, the others are read
                row = _reject_block(out, f"Parquet row group {g}", row, meta.row_group(g).num_rows, e)
                yield 0
                if out.done:
                    return
                continue
            for batch in table.to_batches(max_chunksize=out.batch_size):
                _emit_table_batch(batch, row, out, dataset)
                row += batch.num_rows
                yield batch.nbytes
                if out.done:
                    return


def _read_arrow(split: InputSplit, dataset: DatasetConfig, out: _Collector) -> Iterator[int]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with _open_table_file(split.path) as f:
        try:
            reader = ipc.open_file(f)
            indices = range(split.start, split.end or reader.num_record_batches)
            row = sum(reader.get_batch(i).num_rows for i in range(split.start))
        except pa.ArrowInvalid:
            f.seek(0)
            try:
                stream = ipc.open_stream(f)
            except pa.ArrowInvalid as e:
                raise InputError(f"'{split.path}' is not an Arrow IPC file or stream: {e}") from None
            # A stream has no index of its batches: a corrupt one ends the reading (see `read_split`).
            row = 0
            for batch in stream:
                batch = _checked_arrow_batch(batch, dataset)
                _emit_table_batch(batch, row, out, dataset)
                row += batch.num_rows
                yield batch.nbytes
                if out.done:
                    return
            return
        for i in indices:
            batch, rows = None, None
            try:
                batch = reader.get_batch(i)
                rows = batch.num_rows
                batch = _checked_arrow_batch(batch, dataset)
            except _PROGRAMMING_ERRORS:
                raise
            except Exception as e:  # a corrupt batch of a file: its rows are dead letters, the others are read
                if rows is None:
                    raise  # its row count is unknown, so the positions of the rows after it are too
                row = _reject_block(out, f"Arrow record batch {i}", row, rows, e)
                yield 0
                if out.done:
                    return
                continue
            _emit_table_batch(batch, row, out, dataset)
            row += batch.num_rows
            yield batch.nbytes
            if out.done:
                return


def _checked_arrow_batch(batch: Any, dataset: DatasetConfig) -> Any:
    """The batch's needed columns, fully validated: IPC buffers are used as they are in the file, and a
    corrupt offset would make pyarrow read out of bounds (a crash, found by tests/test_hostile_input.py).
    Checking is cheap next to tokenizing."""
    batch = batch.select(_columns_needed(dataset, batch.schema.names))
    batch.validate(full=True)
    return batch


def _read_csv(split: InputSplit, dataset: DatasetConfig, out: _Collector) -> Iterator[int]:
    """CSV / TSV: records cut by `easydata.io.csv_records` (a malformed one is a dead letter and never
    swallows the good ones after it), parsed by pyarrow in chunks; column types are inferred from
    the first chunk and kept, the content field is always text."""
    import csv

    import pyarrow as pa
    import pyarrow.csv as pcsv

    from easydata.io.csv_records import csv_records

    delimiter = "\t" if strip_compression(split.path).lower().endswith(".tsv") else ","
    with open_file(split.path) as f:
        try:
            header, records = csv_records(f, delimiter)
        except (csv.Error, UnicodeDecodeError) as e:
            raise InputError(f"'{split.path}' is not readable CSV: its header is not a CSV line ({e})") from None
        if header is None:
            return
        header = header if header.endswith(b"\n") else header + b"\n"
        types: dict[str, Any] = {dataset.content_field: pa.string()}
        chunk: list[bytes] = []
        positions: list[int] = []

        def parse() -> int:
            data = b"".join(chunk)
            parse_options = pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
            try:
                table = pcsv.read_csv(pa.py_buffer(header + data), parse_options=parse_options,
                                      convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False))
            except pa.ArrowInvalid:  # a value that does not fit the first chunk's types: this chunk as text
                table = pcsv.read_csv(pa.py_buffer(header + data), parse_options=parse_options,
                                      convert_options=pcsv.ConvertOptions(column_types={n: pa.string() for n in types},
                                                                          strings_can_be_null=False))
            types.update({field.name: field.type for field in table.schema if field.name not in types})
            start = 0
            for batch in table.to_batches():
                _emit_table_batch(batch, positions[start:start + batch.num_rows], out, dataset)
                start += batch.num_rows
            chunk.clear()
            positions.clear()
            return len(data)

        size = 0
        for record in records:
            if record.reason is not None:
                out.reject(record.index, record.reason, record.data[:_EXCERPT_CHARS].decode("utf-8", "replace"))
                yield len(record.data)
            else:
                chunk.append(record.data if record.data.endswith(b"\n") else record.data + b"\n")
                positions.append(record.index)
                size += len(record.data)
                if len(chunk) >= out.batch_size or size >= MAX_BATCH_CHARS:
                    size = 0
                    yield parse()
            if out.done:
                return
        if chunk:
            yield parse()


def total_input_bytes(splits: list[InputSplit]) -> int:
    return sum(s.size for s in splits)

