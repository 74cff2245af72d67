"""`.json` inputs: a JSON array of objects (a record's position is its index), or JSON lines (read as
JSONL). An array is one split, read element by element (`_ArrayText`): memory holds one element and a
read-ahead buffer, not the whole file and every record at once, and a malformed or cut element costs the
elements from there on (one dead letter, the file listed as read in part), not the ones before it."""

from __future__ import annotations

import codecs
import dataclasses
import json
from typing import IO, Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.io.documents import BOM, EXCERPT_CHARS, DocumentCollector, InputSplit, refuse_foreign_bytes
from easydata.io.filesystems import compression_of, open_file
from easydata.io.input_formats.lines import read_lines

__all__ = ["read_json", "READ_BYTES"]

#: Bytes read from the file at a time.
READ_BYTES = 1 << 20
_WHITESPACE = " \t\n\r"


class _ArrayText:
    """The decoded text of a JSON array file, read on demand: `text[pos:]` is what is not parsed yet and
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
    """`.json`: a JSON array of objects (position = index), or JSON lines."""
    with open_file(split.path) as f:
        head = f.read(64)
    refuse_foreign_bytes(head)
    if not head.removeprefix(BOM).lstrip().startswith(b"["):
        yield from read_lines(dataclasses.replace(split, type="jsonl"), dataset, out)
        return
    with open_file(split.path) as f:
        yield from _read_array(f, out, None if compression_of(split.path) else split.size)


def _read_array(f: IO[bytes], out: DocumentCollector, size: Optional[int]) -> Iterator[int]:
    """The elements of a JSON array file as records, each yielding its bytes. What cannot be parsed (a
    malformed or cut element, invalid UTF-8, nesting too deep) is one dead letter at the index where it
    starts, with the bytes read before it and, for an uncompressed file of `size` bytes, those left."""
    text, decoder, index, yielded = _ArrayText(f), json.JSONDecoder(), 0, 0
    try:
        if text.next_char() == "\ufeff":  # a UTF-8 byte-order mark, decoded
            text.pos += 1
        text.next_char()
        text.pos += 1  # the '[' (`read_json` saw it)
        if text.next_char() == "]":
            text.pos += 1
        else:
            while True:
                text.next_char()
                out.add_record(index, text.value(decoder, out.max_bytes))
                index += 1
                after = text.next_char()
                if after in (",", "]"):
                    text.pos += 1
                yield text.bytes_read - yielded  # progress: the bytes read (ahead) by now
                yielded = text.bytes_read
                if out.done:
                    return
                if after == "]":
                    break
                if after != ",":
                    raise json.JSONDecodeError("Expecting ',' delimiter", text.text, text.pos)
        if text.next_char():
            raise json.JSONDecodeError("Extra data", text.text, text.pos)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        reason = ("nested too deeply" if isinstance(e, RecursionError) else
                  e.msg if isinstance(e, json.JSONDecodeError) else f"invalid UTF-8 ({e.reason})")
        where = f" at element {index}" if index else ""
        passed = text.bytes_passed
        out.reject(index, f"malformed JSON array{where}: {reason}", text.text[text.pos:text.pos + EXCERPT_CHARS],
                   read_bytes=passed, unread_bytes=None if size is None else max(size - passed, 0))
