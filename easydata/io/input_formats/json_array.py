"""`.json` inputs: a JSON array of objects (a record's position is its index), JSON lines (read as JSONL), or
JSON values spread over lines (pretty-printed objects, one or several one after another as `jq` prints them;
position = index). An array or a file of values is one split, read value by value (`_ArrayText`): memory
holds one value and a read-ahead buffer, not the whole file and every record at once, and a malformed or cut
value costs the values from there on (one dead letter, the file listed as read in part), not the ones before
it."""

from __future__ import annotations

import codecs
import dataclasses
import json
from typing import IO, Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.io.documents import BOM, EXCERPT_CHARS, DocumentCollector, InputSplit, refuse_foreign_bytes
from easydata.io.filesystems import compression_of, open_file
from easydata.io.input_formats.lines import line_cap, read_lines

__all__ = ["read_json", "READ_BYTES"]

#: Bytes read from the file at a time.
READ_BYTES = 1 << 20
#: Bytes of a file read at most to learn whether it opens with a JSON value spread over lines, when documents
#: have no size limit (a JSON lines file with a malformed first line is read that far, then as JSON lines).
PROBE_BYTES = 256 << 20
#: A `.json` file's first bytes read to tell its layout (its first line, most often).
HEAD_BYTES = 1 << 16
_WHITESPACE = " \t\n\r"


class _ArrayText:
    """The decoded text of a JSON file read value by value, read on demand: `text[pos:]` is what is not parsed yet and
    `bytes_read` the file's bytes read so far (what progress counts; `bytes_passed` is the exact offset of
    `pos`, for a dead letter)."""

    def __init__(self, f: IO[bytes]):
        self._file, self._decoder = f, codecs.getincrementaldecoder("utf-8")("strict")
        self.text, self.pos, self.eof, self.bytes_read = "", 0, False, 0

    def more(self, at_least: int = 0) -> bool:
        """Appends at least `at_least` more bytes of the file (False at its end)."""
        if self.eof:
            return False
        data = self._file.read(max(at_least, READ_BYTES))
        self.bytes_read += len(data)
        self.text = self.text[self.pos:] + self._decoder.decode(data, final=not data)
        self.pos = 0
        self.eof = not data
        return bool(data) or bool(self.text)

    @property
    def bytes_passed(self) -> int:
        """The file's bytes before `pos`: those read, less the text not parsed yet and what the decoder holds."""
        return self.bytes_read - len(self.text[self.pos:].encode("utf-8", "surrogatepass")) - \
            len(self._decoder.getstate()[0])

    def next_char(self) -> str:
        """The next character that is not JSON whitespace, consumed up to it ('' at the end of the file)."""
        while True:
            at = self.pos
            while at < len(self.text) and self.text[at] in _WHITESPACE:
                at += 1
            self.pos = at
            if at < len(self.text):
                return self.text[at]
            if not self.more():
                return ""

    def value(self, decoder: json.JSONDecoder, max_bytes: Optional[int]) -> Any:
        """The JSON value at `pos`, read ahead as far as it reaches. A value the buffer cuts is read again
        with more of the file; one that stays malformed raises once the buffer holds `max_bytes` (the
        largest document allowed) past it, or the file's end."""
        want = READ_BYTES
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                if (max_bytes is None or len(self.text) - self.pos <= max_bytes) and self.more(want):
                    want *= 2
                    continue
                raise
            if end < len(self.text) or self.eof or not self.more(want):  # a number may go on in the next bytes
                self.pos = end
                return value
            want *= 2


def read_json(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    """`.json`: a JSON array of objects (position = index), JSON lines, or JSON values spread over lines (an
    object pretty-printed by `json.dump(indent=...)`, or several one after another as `jq` prints them:
    position = index), which were a dead letter per line."""
    with open_file(split.path) as f:
        head = f.read(HEAD_BYTES)
    refuse_foreign_bytes(head)
    opening = head.removeprefix(BOM).lstrip()
    array = opening.startswith(b"[")
    if not array and not (opening.startswith(b"{") and _spread_over_lines(split.path, head, out.max_bytes)):
        yield from read_lines(dataclasses.replace(split, type="jsonl"), dataset, out)
        return
    with open_file(split.path) as f:
        yield from _read_values(f, out, None if compression_of(split.path) else split.size, array)


def _spread_over_lines(path: str, head: bytes, max_bytes: Optional[int]) -> bool:
    """Whether a `.json` file that opens with an object (`head`: its first bytes) holds JSON values spread over
    lines, not JSON lines: its first line is not a JSON value, and the file's first value parses (else it is
    read as JSON lines, where a malformed first line costs that line alone)."""
    end = head.find(b"\n")
    if end >= 0 or len(head) < HEAD_BYTES:  # the first line is in `head`: JSON lines cost no more opening
        first = head if end < 0 else head[:end + 1]
    else:
        with open_file(path) as f:
            first = f.readline(line_cap(max_bytes))
    try:
        json.loads(first.removeprefix(BOM))
        return False
    except (ValueError, RecursionError):
        pass
    with open_file(path) as f:
        text = _ArrayText(f)
        try:
            if text.next_char() == "\ufeff":
                text.pos += 1
            text.next_char()
            text.value(json.JSONDecoder(), max_bytes if max_bytes is not None else PROBE_BYTES)
        except (ValueError, RecursionError):
            return False
    return True


def _read_values(f: IO[bytes], out: DocumentCollector, size: Optional[int], array: bool) -> Iterator[int]:
    """The elements of a JSON array file (`array`), or the JSON values of a file of them one after another,
    as records, each yielding its bytes. What cannot be parsed (a malformed or cut element, invalid UTF-8,
    nesting too deep) is one dead letter at the index where it starts, with the bytes read before it and, for
    an uncompressed file of `size` bytes, those left."""
    text, decoder, index, yielded = _ArrayText(f), json.JSONDecoder(), 0, 0
    closing = "]" if array else ""
    try:
        if text.next_char() == "\ufeff":  # a UTF-8 byte-order mark, decoded
            text.pos += 1
        if array:
            text.next_char()
            text.pos += 1  # the '[' (`read_json` saw it)
        if text.next_char() == closing:
            text.pos += len(closing)
        else:
            while True:
                text.next_char()
                out.add_record(index, text.value(decoder, out.max_bytes))
                index += 1
                after = text.next_char()
                if array and after in (",", "]"):
                    text.pos += 1
                yield text.bytes_read - yielded  # progress: the bytes read (ahead) by now
                yielded = text.bytes_read
                if out.done:
                    return
                if after == closing:
                    break
                if array and after != ",":
                    raise json.JSONDecodeError("Expecting ',' delimiter", text.text, text.pos)
        if text.next_char():
            raise json.JSONDecodeError("Extra data", text.text, text.pos)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        reason = ("nested too deeply" if isinstance(e, RecursionError) else
                  e.msg if isinstance(e, json.JSONDecodeError) else f"invalid UTF-8 ({e.reason})")
        where = f" at {'element' if array else 'value'} {index}" if index else ""
        passed = text.bytes_passed
        out.reject(index, f"malformed JSON {'array' if array else 'values'}{where}: {reason}",
                   text.text[text.pos:text.pos + EXCERPT_CHARS],
                   read_bytes=passed, unread_bytes=None if size is None else max(size - passed, 0))
