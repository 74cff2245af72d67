"""Documents as the readers make them: where they come from (`InputSplit`), batches of them
(`DocumentBatch`), the records that could not become one (`Reject`), and the checks every record gets
(`DocumentCollector`: content field, chat messages, values no column or UTF-8 text can hold, size limits).

Shared by every input format (`easydata.io.input_formats`) and by the streaming pipeline
(`collect_records`), so a record is judged the same way wherever it was read.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional, Sequence

from easydata.config import DatasetConfig, redact_url, redact_urls
from easydata.io.record_format import FormatError, RecordFormatter
from easydata.io.conversations import (CHAT_FIELDS, ChatError, conversation_from_record, is_alpaca, is_chat_field,
                                       is_prompt_completion, json_messages)

__all__ = ["InputSplit", "DocumentBatch", "Reject", "DocumentCollector", "collect_records", "parse_json_record",
           "unusable_value", "MAX_BATCH_CHARS", "EXCERPT_CHARS", "BOM", "refuse_foreign_bytes", "lfs_pointer", "LFS_POINTER", "record_excerpt",
           "raise_unless_corrupt"]

EXCERPT_CHARS = 200
BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark
#: Byte-order marks of the encodings that are not UTF-8 (longest first: UTF-32 LE's starts with UTF-16 LE's).
OTHER_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32", "big-endian"), (b"\xff\xfe\x00\x00", "UTF-32", "little-endian"),
              (b"\xfe\xff", "UTF-16", "big-endian"), (b"\xff\xfe", "UTF-16", "little-endian"))


#: Where the NUL bytes of a text that starts with an ASCII character fall in its first four bytes, in the
#: encodings that are not UTF-8 (RFC 4627 section 3; Python's `json.detect_encoding`): 0 a NUL, 1 not.
_NUL_PATTERNS = (((0, 0, 0, 1), "UTF-32", "big-endian", "UTF-32BE"), ((1, 0, 0, 0), "UTF-32", "little-endian", "UTF-32LE"),
                 ((0, 1, 0, 1), "UTF-16", "big-endian", "UTF-16BE"), ((1, 0, 1, 0), "UTF-16", "little-endian", "UTF-16LE"))


#: How a Git LFS pointer file begins (git-lfs's docs/spec.md): what a clone without git-lfs, or a `git lfs pull`
#: of some files only, leaves in place of a data file (a Hub dataset's Parquet files, cloned with git).
LFS_POINTER = b"version https://git-lfs.github.com/spec/"

#: The first bytes of a compressed stream, by codec (the suffix that names it): none of them starts UTF-8 text
#: but bz2's, whose block magic (`1AY&SY`) follows its header.
_COMPRESSED = ((re.compile(rb"\x1f\x8b"), "gzip", ".gz"), (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd", ".zst"),
               (re.compile(rb"\xfd7zXZ\x00"), "xz", ".xz"), (re.compile(rb"BZh[1-9]1AY&SY"), "bz2", ".bz2"))


def lfs_pointer(head: bytes) -> Optional[str]:
    """Why a file whose first bytes are `head` is no data, when it is a Git LFS pointer; else None."""
    if head.startswith(LFS_POINTER):
        return ("a Git LFS pointer, not the file's data: fetch it (git lfs pull in the clone, or download the file"
                " with huggingface_hub)")
    return None


def refuse_foreign_bytes(head: bytes) -> None:
    """Raises ValueError when a text input's first bytes (its first line, or more) say it is not UTF-8 text:
    another encoding's byte-order mark, or without one the NUL bytes that UTF-16 and UTF-32 put beside an ASCII
    character (a JSON text starts with one; UTF-8 text holds no NUL); a Git LFS pointer; a compressed stream in
    a file whose name says no compression. Each was read as lines of dead letters for malformed JSON or invalid
    UTF-8 without a word of why (a UTF-16 file, what Windows tools write as "Unicode"; a `.jsonl` that is
    gzip data), or, a pointer's lines, as documents; the file is dead-lettered with this reason instead."""
    for mark, encoding, order in OTHER_BOMS:
        if head.startswith(mark):
            raise ValueError(f"{encoding} text ({order} byte-order mark), not UTF-8: convert it (iconv -f {encoding}"
                             " -t UTF-8)")
    if len(head) >= 4:
        pattern = tuple(int(b != 0) for b in head[:4])
        for nuls, encoding, order, name in _NUL_PATTERNS:
            if pattern == nuls and all(b < 0x80 for b in head[:4]):
                raise ValueError(f"{encoding} text ({order}, no byte-order mark), not UTF-8: convert it (iconv -f"
                                 f" {name} -t UTF-8)")
    pointer = lfs_pointer(head)
    if pointer is not None:
        raise ValueError(pointer)
    for magic, codec, suffix in _COMPRESSED:
        if magic.match(head):
            raise ValueError(f"{codec}-compressed data in a file whose name says no compression: add {suffix} to its"
                             " name (or decompress it)")


# A batch closes at `batch_size` documents or this many characters of text, whichever comes first.
MAX_BATCH_CHARS = 4 * 2**20


def raise_unless_corrupt(error: Exception, path: str, where: str) -> None:
    """The one rule for a failure while an input is read: a bug (`easydata.errors.PROGRAMMING_ERRORS`) is raised
    as it is, a
    failure that may pass (`easydata.errors.is_transient`: a reset connection, a timeout, a store's I/O
    error) is raised as `TransientInputError` naming the file, so the step fails and its bundle is retried;
    only what remains (corrupt or truncated data) returns, for the caller to dead-letter.

    Raises:
      TransientInputError: one line naming the file and `where` it failed.
    """
    from easydata.errors import PROGRAMMING_ERRORS, TRANSIENT_ADVICE, TransientInputError, is_transient

    if isinstance(error, PROGRAMMING_ERRORS):
        raise error
    if is_transient(error):
        detail = str(error).splitlines()[0][:200] if str(error) else ""
        raise TransientInputError(
            f"reading '{path}' failed {where}: {type(error).__name__}: {detail}{TRANSIENT_ADVICE}") from error


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

    def as_dict(self) -> dict[str, Any]:
        """Its fields, in order (`dataclasses.asdict` without its deep copies and field lookups: 100,000
        splits are recorded at once; its instance dict holds exactly its fields, set in order by `__init__`)."""
        return dict(self.__dict__)

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
    #: The record's field names, when it was an object; a table's columns, of which its record holds those read
    #: (not written to the dead letter: planning names them when a dataset's content field is wrong,
    #: `easydata.run.run_plan.check_fields`).
    fields: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    @property
    def partial_input(self) -> bool:
        """This dead letter stands for the unread rest of a file."""
        return self.read_bytes is not None

    def to_json(self) -> dict[str, Any]:
        """The dead letter's line (its source and reason without a URL's credentials: `easydata.config.secrets`)."""
        data = dataclasses.asdict(self)
        del data["fields"]
        data["source"], data["reason"] = redact_url(self.source), redact_urls(self.reason)
        if not self.partial_input:
            del data["read_bytes"], data["unread_bytes"]
        return data

    def partial_entry(self) -> dict[str, Any]:
        """The manifest's record of a file read only in part (`partial_inputs`)."""
        return {"path": redact_url(self.source), "offset": self.position, "read_bytes": self.read_bytes,
                "unread_bytes": self.unread_bytes, "reason": redact_urls(self.reason)}

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
      field_types: the Arrow type of each additional field whose every value in the batch came from a table
        column of that type (`easydata.io.field_values`); the other fields' types are inferred.
      sources: the file each chat record's key name stands for (`InputSplit.key_name` -> its path), so the
        chat stage's dead letters name the file as the reader's do; None without chat records.
      rows: token rows made already (a `pa.RecordBatch`): a batch a resumed run loads from its checkpoint
        (`easydata.run.checkpoint`) instead of reading, which the tokenize step passes on unchanged; None for
        documents to tokenize. Loaded batches travel with the read ones so that one step makes every token row
        of a dataset: the local runner lost elements of a Flatten of two steps' large outputs (Beam's FnApiRunner
        with more than one worker).
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
    field_types: Optional[dict[str, Any]] = None
    sources: Optional[dict[str, str]] = None
    rows: Optional[Any] = None

    def __len__(self) -> int:
        return len(self.texts)


class DocumentCollector:
    """Accumulates records into `DocumentBatch`es and rejects into a list."""

    def __init__(self, dataset: DatasetConfig, source: str, key_name: str, batch_size: int,
                 max_document_bytes: Optional[int], limit: Optional[int], messages_field: str = "messages"):
        self.ds, self.source, self.key_name, self.batch_size = dataset, source, key_name, batch_size
        self.messages_field = messages_field
        #: The content field holds chat records (`is_chat_field`): its strings may be messages kept as JSON text.
        self.chat_content = is_chat_field(dataset.content_field, messages_field)
        self.formatter = RecordFormatter.for_dataset(dataset)
        self.max_bytes, self.limit = max_document_bytes, limit
        self.rejects: list[Reject] = []
        self.count = 0
        self.pending_bytes = 0
        #: The fields every record being read has, where its records hold only those read (a table's columns):
        #: named by its dead letters. Set by a table's reader, cleared for each split.
        self.source_fields: tuple[str, ...] = ()
        #: The Arrow types of the additional fields of the table being read (`field_values.table_types`); its
        #: values are exact (`field_values.exact_values`) and need no check. Set and cleared as `source_fields`.
        self.source_types: dict[str, Any] = {}
        self._reset()

    def _reset(self) -> None:
        self.keys: list[str] = []
        self.texts: list[str] = []
        self.text_chars = 0
        self.conversations: Optional[list[Any]] = None
        self.sources: dict[str, str] = {}
        self.fields: dict[str, list[Any]] = {f: [] for f in self.ds.additional_fields}
        self.field_types: dict[str, Any] = {}  # the types every value of the batch so far has
        self._types_of: Optional[dict[str, Any]] = None  # the `source_types` they are taken from

    @property
    def full(self) -> bool:
        # Bounded by bytes too: a batch of long documents would otherwise hold several GB of tokenizer
        # output at once.
        return len(self.texts) >= self.batch_size or self.text_chars >= MAX_BATCH_CHARS

    @property
    def done(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def reject(self, position: int, reason: str, excerpt: Any = "", records: int = 1, *,
               read_bytes: Optional[int] = None, unread_bytes: Optional[int] = None,
               fields: tuple[str, ...] = ()) -> None:
        """A dead letter of `records` records at `position`; `fields`: the fields the records have, when neither
        the table read (`source_fields`) nor the excerpt (a record) says."""
        if self.done:
            return
        self.count += records
        text = excerpt if isinstance(excerpt, str) else record_excerpt(excerpt)
        fields = self.source_fields or (tuple(sorted(map(str, excerpt))) if isinstance(excerpt, dict) else fields)
        self.rejects.append(Reject(self.ds.name, self.source, position, reason, text[:EXCERPT_CHARS], records,
                                   read_bytes, unread_bytes, fields))

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
        field = self.ds.content_field if self.ds.content_field in record else self.messages_field
        if (self.chat_content or field == self.messages_field) and isinstance(record.get(field), str) and \
                (messages := json_messages(record[field])) is not None:  # a chat record kept as JSON text (a CSV
            record = {**record, field: messages}  # file's, a table's string column): checked as its messages are
        for name in (self.ds.content_field, self.messages_field, *CHAT_FIELDS,
                     *self.ds.additional_fields):
            problem = unusable_value(record[name], f"field '{name}'") \
                if name in record and name not in self.source_types else None
            if problem:
                return self.reject(position, problem, record)
        text = record.get(self.ds.content_field, record.get(self.messages_field))
        if isinstance(text, bytes) and self.ds.content_field in record:  # a table's BINARY column of text (Parquet
            try:  # written without its UTF-8 annotation, as older Hive and Impala writers do)
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                return self.reject(position, f"content field '{self.ds.content_field}' holds bytes that are not"
                                   f" UTF-8 text ({e.reason} at byte {e.start})", record)
        is_pair = text is None and (is_prompt_completion(record) or is_alpaca(record))
        if isinstance(text, list) or is_pair:
            try:
                conversation = conversation_from_record(text, record)
            except ChatError as e:
                return self.reject(position, str(e), record)
            return self._accept_conversation(position, conversation, record)
        if text is None and "prompt" in record and "completion" in record:
            return self.reject(position, "prompt and completion must both be strings or both lists of messages, got"
                               f" a {type(record['prompt']).__name__} and a {type(record['completion']).__name__}",
                               record)
        if self.ds.content_field not in record:
            return self.reject(position, f"missing content field '{self.ds.content_field}'", record)
        if not isinstance(text, str):
            # pandas' `DataFrame.to_json()` (orient "columns", its default) keeps a column as {row index: value}
            pandas = isinstance(text, dict) and text and all(isinstance(k, str) and k.isdigit() for k in text)
            return self.reject(position, f"content field '{self.ds.content_field}' is a {type(text).__name__}, not a"
                               " string" + (" (a pandas DataFrame.to_json() file, by column? write it with"
                                            " orient='records', lines=True)" if pandas else ""), record)
        self._accept(position, text, record)

    def _accept_conversation(self, position: int, conversation: Any, record: dict[str, Any]) -> None:
        if self.conversations is None:
            self.conversations = [None] * len(self.texts)
        if self.fields and self._types_of is not self.source_types:
            self._take_types()
        self.count += 1
        self.keys.append(f"{self.key_name}@{position}")
        self.sources[self.key_name] = self.source
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

    def add_text_rows(self, positions: Sequence[int], columns: dict[str, list[Any]]) -> None:
        """Adds rows of a table column-wise: `columns` is every column read, in the table's order, the
        content column (strings or None) among them. The same documents and
        dead letters as `add_record` on each row's dict, for a table `takes_text_rows` accepts, without
        building the dicts (a row's dict is built only for its dead letter)."""
        content = self.ds.content_field
        texts = columns[content]
        extra = [columns.get(f) for f in self.fields]
        for i, position in enumerate(positions):
            if self.done:
                return
            text = texts[i]
            if text is None:
                self.reject(position, f"content field '{content}' is a NoneType, not a string",
                            {name: values[i] for name, values in columns.items()})
            elif self.chat_content and (messages := json_messages(text)) is not None:  # chat kept as JSON text
                self.add_record(position, {**{name: values[i] for name, values in columns.items()}, content: messages})
            else:
                self._accept_values(position, text, [None if values is None else values[i] for values in extra])

    def takes_text_rows(self, schema: Any) -> bool:
        """Whether `add_text_rows` judges a table of this Arrow schema as `add_record` would: no record
        formatter, a string content column, and no other column that could hold what `unusable_value`
        refuses (an unsigned 64-bit integer, a nested value; a typed field's column, `source_types`, holds only
        what its output column holds) or make a row a prompt/completion or an Alpaca pair."""
        import pyarrow.types as types

        if self.formatter is not None or self.ds.content_field not in schema.names:
            return False
        if {"prompt", "completion"} <= set(schema.names) or {"instruction", "output"} <= set(schema.names):
            return False
        for field in schema:
            if field.name == self.ds.content_field:
                if not (types.is_string(field.type) or types.is_large_string(field.type)):
                    return False
            elif field.name not in self.source_types and not _flat_safe(field.type):
                return False
        return True

    @property
    def takes_plain_json(self) -> bool:
        """Whether a record holding only the content field, a string, may go to `add_text` instead of
        `add_record` (the same document or dead letter): no record formatter, no additional fields, and no
        record limit (a limit stops reading at a line, which a block of lines would read past)."""
        return self.formatter is None and not self.fields and self.limit is None

    def _accept(self, position: int, text: str, record: Optional[dict[str, Any]]) -> None:
        self._accept_values(position, text, None if record is None else [record.get(f) for f in self.fields])

    def _accept_values(self, position: int, text: str, values: Optional[list[Any]]) -> None:
        if not text.strip():
            return self.reject(position, "empty text", text)
        if self.max_bytes is not None and len(text) * 4 > self.max_bytes and \
                len(text.encode("utf-8")) > self.max_bytes:
            return self.reject(position, f"document is larger than max_document_bytes={self.max_bytes}", text)
        if self.fields and self._types_of is not self.source_types:
            self._take_types()
        self.count += 1
        self.keys.append(f"{self.key_name}@{position}")
        self.texts.append(text)
        self.text_chars += len(text)
        if self.conversations is not None:
            self.conversations.append(None)
        for f, value in zip(self.fields, values if values is not None else [None] * len(self.fields)):
            self.fields[f].append(value)

    def _take_types(self) -> None:
        """The batch's documents now come from a source typing its fields `source_types`: a field keeps its
        type only while every document's value came from a column of that type."""
        current = self._types_of = self.source_types
        self.field_types = dict(current) if not self.texts else \
            {name: t for name, t in self.field_types.items() if current.get(name) == t}

    def flush(self, input_bytes: int = 0) -> Optional[DocumentBatch]:
        self.pending_bytes += input_bytes
        if not self.texts:
            return None
        batch = DocumentBatch(self.ds.name, self.keys, self.texts, self.fields, self.pending_bytes,
                              conversations=self.conversations, field_types=self.field_types or None,
                              sources=self.sources or None)
        self.pending_bytes = 0
        self._reset()
        return batch


def _flat_safe(arrow_type: Any) -> bool:
    """A column type none of whose values `unusable_value` can refuse: text (valid UTF-8 holds no lone
    surrogate), bytes, booleans, numbers within int64, dates and times, nulls."""
    import pyarrow.types as types

    if types.is_uint64(arrow_type):
        return False
    return (types.is_string(arrow_type) or types.is_large_string(arrow_type) or types.is_binary(arrow_type)
            or types.is_large_binary(arrow_type) or types.is_boolean(arrow_type) or types.is_integer(arrow_type)
            or types.is_floating(arrow_type) or types.is_temporal(arrow_type) or types.is_null(arrow_type)
            or types.is_decimal(arrow_type) or types.is_fixed_size_binary(arrow_type))


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
    collector = DocumentCollector(dataset, source, key_name, len(records) + 1, max_document_bytes, None, messages_field)
    for position, record, reason, excerpt in records:
        if record is None:
            collector.reject(position, reason, excerpt)
        else:
            collector.add_record(position, record)
    return collector.flush(), list(collector.rejects)

def record_excerpt(value: Any) -> str:
    """The start of a record for a dead letter, as JSON: as the user's JSON lines wrote it (a Python `repr`
    showed `{'messages': [{'role': ...` and `None`), a table's values JSON cannot hold (bytes, timestamps) as
    their `str`. A deeply nested record cannot be serialised whole."""
    try:
        excerpt = json.dumps(value, ensure_ascii=False, default=str)[:EXCERPT_CHARS]
    except (RecursionError, ValueError):  # ValueError: a value that holds itself
        return f"<{type(value).__name__} nested too deeply to show>"
    return excerpt.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate as its escape

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

def _has_surrogate(text: str) -> bool:
    """Whether `text` holds a code point U+D800-U+DFFF: exactly the strings strict UTF-8 cannot encode (the
    encoder's C loop is ~5x faster than a regex scan of a long non-ASCII text)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False

def unusable_value(value: Any, where: str) -> Optional[str]:
    """Why a value a document carries cannot be stored, else None: an integer outside int64 (JSON allows
    any; no Arrow column holds it) or text with a lone UTF-16 surrogate (a JSON `\\ud800` escape; no
    UTF-8 text holds one). Nested values are walked without recursion."""
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _has_surrogate(value):
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
