"""JSONL and text inputs: lines whose first byte lies in a split's byte range, read in bounded pieces
(one huge line is never held whole); text read as whole documents or paragraphs (`sample_by`).

Uncompressed files split into equal byte ranges (`byte_ranges`); a split that starts inside a line
leaves that line to the split before it. A large compressed file is read in a few parts
(`compressed_ranges`): ranges of its decompressed bytes, each decompressing the file from its start and
passing over what lies before its range (a gzip or bz2 stream cannot be entered in the middle), so that
several workers tokenize it; a line's position is the same whichever part reads it.
"""

from __future__ import annotations

import io
import re
from typing import Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.io.documents import BOM, EXCERPT_CHARS, DocumentCollector, InputSplit, parse_json_record, \
    raise_unless_corrupt, refuse_foreign_bytes
from easydata.io.conversations import json_messages
from easydata.io.filesystems import compression_of, decompressed_size, file_head, open_file
from easydata.io.input_formats.json_lines import FAST_MAX_MEAN_BYTES, parse_plain_lines

__all__ = ["read_lines", "read_text_whole", "read_at_most", "byte_ranges", "compressed_parts", "compressed_ranges",
           "line_cap", "line_buffer", "BLOCK_LINES", "BLOCK_BYTES", "LINE_BUFFER_BYTES", "MAX_COMPRESSED_PARTS"]

#: The first bytes of a file `refuse_foreign_bytes` looks at when a split starts after them.
HEAD_BYTES = 64

#: Plain-text JSON lines judged together (`_judge_block`), and the bytes past which a block is judged early.
BLOCK_LINES = 256
BLOCK_BYTES = BLOCK_LINES * FAST_MAX_MEAN_BYTES


def byte_ranges(size: int, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    """`ceil(size / target_bytes)` contiguous ranges of equal size (within a byte), not full ranges
    and a remainder: local runners hand each worker a fixed share of the splits, so a small last
    split would leave one worker idle while the others finish theirs."""
    count = -(-size // target_bytes)
    bounds = [size * i // count for i in range(count + 1)]
    return [(start, end, end - start) for start, end in zip(bounds, bounds[1:])]

#: Parts a compressed line file is read in at most (`compressed_parts`): each decompresses the file up to its
#: range, so k parts decompress it (k + 1) / 2 times in all.
MAX_COMPRESSED_PARTS = 8


def compressed_parts(size: int, dataset_bytes: int, target_bytes: int, readers: int) -> int:
    """How many parts a compressed line file of `size` bytes is read in, in a dataset of `dataset_bytes`
    (`plan_input`'s file sizes, compressed as they are) cut into splits of `target_bytes`, for a run of
    `readers` parallel readers: 1 for a file of at most `target_bytes`; else its share of `readers` (one
    large file: a part per reader, two: half as many each, as many as readers: 1), at most
    `MAX_COMPRESSED_PARTS` and one per `target_bytes`. More parts than readers only cost: each decompresses
    what comes before it (docs/performance.md, "One large compressed file in parts")."""
    if size <= target_bytes:
        return 1
    return max(1, min(MAX_COMPRESSED_PARTS, readers, size // target_bytes, readers * size // max(dataset_bytes, 1)))


def compressed_ranges(path: str, size: int, parts: int) -> list[tuple[int, Optional[int], int]]:
    """`parts` ranges `(start, end, share)` of the decompressed bytes of the compressed file at `path` (`size`
    bytes): bounds at equal fractions of its estimated decompressed size (`decompressed_size`), the last one
    open-ended, so an estimate that is off moves work between parts and never loses a line; `share` is the
    part's share of `size` (the compressed bytes, as the plan counts input bytes). Fewer ranges when the file
    decompresses to fewer bytes than `parts`."""
    total = decompressed_size(path, size)
    bounds = sorted({total * i // parts for i in range(parts)})
    shares = [size * i // len(bounds) for i in range(len(bounds) + 1)]
    ends: list[Optional[int]] = [*bounds[1:], None]
    return [(start, end, shares[i + 1] - shares[i]) for i, (start, end) in enumerate(zip(bounds, ends))]


def line_cap(max_bytes: Optional[int]) -> int:
    """Bytes of one input line read at most: a document's JSON line may escape each character to up
    to 6 bytes (`\\uXXXX`); a longer line is rejected unread, so one huge line cannot fill memory."""
    return -1 if max_bytes is None else 6 * max_bytes + (1 << 16)

def _sized_lines(f: Any, buffer_size: int = io.DEFAULT_BUFFER_SIZE) -> Any:
    """`f`, or `f` buffered (`buffer_size`) where its `readline` takes no size (fsspec's remote files: an
    8 KiB buffer was a call into fsspec's Python per 8 KiB, ~0.8 CPU s per GB): every line read here is
    read in bounded pieces."""
    try:
        f.readline(0)  # reads nothing
    except TypeError:
        return io.BufferedReader(f, buffer_size)
    return f

#: The read buffer of a large file read by line: `readline` refills an 8 KiB buffer each time (a line of
#: 23 KB took three): a system call for a local file (0.6-0.8 CPU s per GB of JSONL against 0.14-0.19 with
#: 1 MiB), a call into fsspec's Python for an object store's (~0.8 against 0.2).
LINE_BUFFER_BYTES = 1 << 20


def line_buffer(size: int) -> int:
    """The read buffer for a split of `size` bytes read by line: `LINE_BUFFER_BYTES`, no more than the split
    needs (a dataset of many small files opens each: a 1 MiB buffer is a 1 MiB allocation per file)."""
    return max(io.DEFAULT_BUFFER_SIZE, min(LINE_BUFFER_BYTES, size + 1))


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

def read_lines(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    """JSONL and text: lines whose first byte lies in [start, end); a UTF-8 BOM opening the file is
    encoding, not text, and is dropped.

    Plain-text JSON lines (`DocumentCollector.takes_plain_json`) are judged a block of `BLOCK_LINES` at a time
    (`json_lines.parse_plain_lines`, exactly what one `json.loads` per line gives); the bytes of each line are
    still yielded right after its document is added, so batches close where they would line by line."""
    is_json = split.type == "jsonl"
    if split.type == "txt" and dataset.sample_by != "line":
        yield from read_text_whole(split, dataset, out)
        return
    blocks = is_json and out.takes_plain_json
    cap = line_cap(out.max_bytes)
    buffer_size = line_buffer(split.size)
    with open_file(split.path, buffer_size=buffer_size, read_bytes=split.size) as opened:
        f = _sized_lines(opened, buffer_size)
        position = split.start
        if split.start > 0 and compression_of(split.path) is None:
            refuse_foreign_bytes(file_head(split.path, HEAD_BYTES))  # each split of a UTF-16 file says so, not only the first
            f.seek(split.start - 1)
            position = split.start - 1 + _skip_line(f)  # the rest of a line that belongs to the previous split
        elif split.start > 0:  # a part of a compressed file: what lies before it is decompressed and passed over
            try:
                position = _pass_over(f, split.start - 1)
                if position == split.start - 1:
                    position += _skip_line(f)
            except Exception as e:  # damage before the part: the part holding it reports it
                raise_unless_corrupt(e, split.path, f"before byte {split.start}")
                return
        pending: list[tuple[int, bytes, int]] = []
        pending_bytes = 0
        lines = _bounded_lines(f, cap)
        while True:
            try:
                raw, skipped = next(lines)
            except StopIteration:
                break
            except Exception:  # damage read here: the lines read before it count, as they do one by one
                yield from _judge_block(pending, dataset.content_field, out)
                raise
            if split.end is not None and position >= split.end:
                break
            line_pos, position = position, position + len(raw) + skipped
            if line_pos == 0:
                refuse_foreign_bytes(raw)
                if raw.startswith(BOM):
                    raw = raw[len(BOM):]
            if blocks:
                pending.append((line_pos, raw, skipped))
                pending_bytes += len(raw)
                # judged at BLOCK_LINES lines, or sooner when they outgrow what the block parser takes: a block
                # never holds more than one long line beyond BLOCK_BYTES (line by line holds one)
                if len(pending) >= BLOCK_LINES or pending_bytes > BLOCK_BYTES:
                    yield from _judge_block(pending, dataset.content_field, out)
                    pending, pending_bytes = [], 0
                continue
            _judge_line(line_pos, raw, skipped, is_json, out)
            yield len(raw) + skipped
            if out.done:
                return
        yield from _judge_block(pending, dataset.content_field, out)

def _judge_line(line_pos: int, raw: bytes, skipped: int, is_json: bool, out: DocumentCollector) -> None:
    """One line (`skipped`: bytes of it past the cap, not read) into a document or a dead letter."""
    stripped = raw.strip()
    if skipped:
        out.reject(line_pos, f"line of {len(raw) + skipped} bytes is larger than max_document_bytes="
                             f"{out.max_bytes} allows (not read)", stripped[:EXCERPT_CHARS].decode("utf-8", "replace"))
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

def _judge_block(pending: list[tuple[int, bytes, int]], content_field: str, out: DocumentCollector) -> Iterator[int]:
    """JSON lines `(position, raw, skipped)` in order: parsed in one call when they are all plain text and short,
    else each on its own; yields each line's bytes after its document (or dead letter) is added."""
    rows = [(i, line) for i, (_, raw, skipped) in enumerate(pending) if not skipped and (line := raw.strip())]
    texts = None
    if rows and sum(len(line) for _, line in rows) <= FAST_MAX_MEAN_BYTES * len(rows):
        texts = parse_plain_lines([line for _, line in rows], content_field)
    parsed = {} if texts is None else {i: text for (i, _), text in zip(rows, texts)}
    for i, (line_pos, raw, skipped) in enumerate(pending):
        if i not in parsed:
            _judge_line(line_pos, raw, skipped, True, out)
        elif out.chat_content and (messages := json_messages(parsed[i])) is not None:
            out.add_record(line_pos, {content_field: messages})  # a chat record kept as JSON text: the line's record
        else:
            out.add_text(line_pos, parsed[i])
        yield len(raw) + skipped

def _pass_over(f: Any, count: int) -> int:
    """Reads and drops `count` bytes of `f` (a decompressing stream, which cannot seek), in 1 MiB pieces;
    returns the bytes passed over (fewer at the stream's end)."""
    passed = 0
    while passed < count:
        piece = f.read(min(1 << 20, count - passed))
        if not piece:
            break
        passed += len(piece)
    return passed


def _skip_line(f: Any) -> int:
    """Reads past the end of the current line in bounded pieces (a split may start inside a 1 GB line);
    returns the bytes skipped."""
    skipped = 0
    while True:
        piece = f.readline(1 << 20)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped

def read_at_most(f: Any, limit: int, expected: Optional[int] = None) -> bytes:
    """`f.read(limit)` in pieces: first `expected + 1` bytes (the file's size when planned; 1 MiB when
    unknown), then as much as read so far (at least 64 KiB). A buffered reader allocates the bytes it is
    asked for before it reads (asking for a limit of megabytes cost ~20 us a file: a dataset of 100,000
    small files), and a stream may return fewer bytes than asked before its end, so only an empty read or
    `limit` ends the reading."""
    parts: list[bytes] = []
    total = 0
    ask = expected + 1 if expected is not None else 1 << 20
    while total < limit:
        piece = f.read(min(ask, limit - total))
        if not piece:
            break
        parts.append(piece)
        total += len(piece)
        ask = max(1 << 16, total)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_text_whole(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    """A text file as one document (`sample_by: document`) or as paragraphs. A document over
    `max_document_bytes` is rejected after reading only that many bytes of it (and counting the rest in
    bounded pieces), so a 1 GB file never sits in memory whole."""
    with open_file(split.path) as f:
        if dataset.sample_by == "document" and out.max_bytes is not None:
            expected = split.size if compression_of(split.path) is None else None
            data = read_at_most(f, out.max_bytes + len(BOM) + 1, expected)
            if len(data) > out.max_bytes + (len(BOM) if data.startswith(BOM) else 0):
                size = len(data)
                while piece := f.read(1 << 20):
                    size += len(piece)
                out.reject(0, f"document of {size:,} bytes is larger than max_document_bytes={out.max_bytes} allows"
                              " (not read whole)", data[:EXCERPT_CHARS].decode("utf-8", "replace"))
                yield size
                return
        else:
            data = f.read()
    refuse_foreign_bytes(data)
    bom = len(BOM) if data.startswith(BOM) else 0  # read with the first paragraph
    data = data[bom:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        out.reject(0, f"invalid UTF-8 at byte {e.start}", data[:EXCERPT_CHARS].decode("utf-8", "replace"))
        yield len(data) + bom
        return
    if dataset.sample_by == "document":
        out.add_text(0, text)
        yield len(data) + bom
        return
    position = 0
    for paragraph, separator in paragraphs(text):
        if paragraph.strip():
            out.add_text(position, paragraph.strip("\r\n"))
        position += len(paragraph) + len(separator)
        yield len(paragraph.encode("utf-8")) + len(separator) + bom
        bom = 0


#: What ends a paragraph: a blank line, after Unix (`\n`) or Windows (`\r\n`) line ends.
_BLANK_LINE = re.compile(r"\r?\n\r?\n")


def paragraphs(text: str) -> Iterator[tuple[str, str]]:
    """`(paragraph, the separator after it)` for each piece of `text` between blank lines, in order (the last
    separator ""), as `text.split("\\n\\n")` cuts a Unix file, and a Windows file (`\\r\\n`) alike: it was one
    paragraph, each `\\r\\n\\r\\n` inside a document."""
    start = 0
    for match in _BLANK_LINE.finditer(text):
        yield text[start:match.start()], match.group()
        start = match.end()
    yield text[start:], ""
