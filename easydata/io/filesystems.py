"""Filesystem access through fsspec: glob expansion with clear errors, compressed opening, joining.

Every path in the project is a local path or an fsspec URL (`file://`, `gs://`, `s3://`,
`memory://`, `hf://`, ...). This module is the one place that talks to fsspec, so remote storage
behaves like local storage everywhere else.
"""

from __future__ import annotations

import functools
import io
import os
import re
import posixpath
import stat
import sys
from typing import IO, Any, Callable, Container, Iterable, NamedTuple

import fsspec
from fsspec.core import url_to_fs

from easydata.errors import InputError, OutputError

__all__ = ["special_file", "refuse_special", "directory_root", "file_head", "open_regular", "read_text", "read_bytes", "file_version", "remove_file", "temp_name", "write_atomic", "expand_data_files", "list_data_files", "ListedFiles", "open_file", "open_arrow_file", "staging_ipc_options", "compression_of", "strip_compression", "decompressed_size", "join", "get_fs",
           "file_size", "file_facts", "local_path", "require_bucket"]

_COMPRESSION_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}


def get_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Returns the filesystem and the path within it for a local path or URL."""
    if url.startswith("/") and os.sep == "/" and "::" not in url:
        # an absolute local path: what `url_to_fs` gives for it, without its URL parsing (a planning of
        # 100,000 input files resolves each path several times)
        return _local_fs(), url.rstrip("/") or "/"
    try:
        return url_to_fs(url)
    except (ImportError, ValueError) as e:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        raise InputError(f"cannot access '{url}': {e} (is the extra for '{protocol}://' installed?)") from None
    except OSError as e:  # a file system that connects when it is made (ftp://, sftp://): no network, no host
        if "://" not in url and "::" not in url and not _cwd_exists():  # a relative path, relative to nothing
            raise InputError(f"cannot access '{url}': the current directory is gone (deleted, or unmounted)"
                             f" and the path is relative to it: cd to an existing directory, or give an absolute"
                             f" path") from None
        raise InputError(f"cannot access '{url}': {type(e).__name__}: {e} (no network, or a wrong host?)") from None


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _local_fs() -> fsspec.AbstractFileSystem:
    return fsspec.filesystem("file")


def _unstrip(fs: fsspec.AbstractFileSystem, template: str, path: str) -> str:
    """Turns a path returned by `fs` back into a URL of the same form the user wrote."""
    return fs.unstrip_protocol(path) if "://" in template else path


def directory_root(directory: str) -> str:
    """A directory given as `data_files`, in the form `list_data_files` gives the files found in it (local
    paths absolute, URLs as written), without a trailing `/`: the prefix of each such file's path."""
    fs, path = get_fs(directory)
    return _unstrip(fs, directory, path.rstrip("/"))


class ListedFiles(NamedTuple):
    """`list_data_files`' answer: the files, the size and `file_version` of those whose listing told them
    (local regular files that are not links; see `list_data_files`), and the directory given as `data_files`
    that each file found by listing a directory came from (`easydata.io.sources` keeps the dataset's own)."""

    files: list[str]
    facts: dict[str, tuple[int, str]]
    directories: dict[str, str]


def expand_data_files(patterns: Iterable[str], exclude_dirs: Iterable[str] = ()) -> list[str]:
    """Expands paths and globs into a sorted, de-duplicated list of files (`list_data_files`' files)."""
    return list_data_files(patterns, exclude_dirs).files


def list_data_files(patterns: Iterable[str], exclude_dirs: Iterable[str] = ()) -> ListedFiles:
    """Expands paths and globs into a sorted, de-duplicated list of files, with what the listing already
    told of them: a local glob's listing gives each match's size, times and whether it is a link, which is
    what `file_facts` would look up again (a planning of 100,000 files looked at each file three more
    times). Only local regular files that are not links are given facts: a link's listing describes the
    link, and an object store's listing may leave out what a look at the object gives (S3's VersionId).

    Args:
      exclude_dirs: directories whose files are never inputs (a run's own output and its staging: a
        glob that matches them would read the previous output back in); skipped with one warning.

    Local matches that are not regular files once links are followed (a symlink loop, a broken
    link) are skipped with one warning: they cannot be read, and must not end the run in a traceback.

    Raises:
      InputError: when a plain path does not exist or a glob matches no file.
    """
    files: list[str] = []
    facts: dict[str, tuple[int, str]] = {}
    directories: dict[str, str] = {}
    for pattern in patterns:
        if pattern.startswith("hf://"):  # offline: the cached snapshot of the Hub repo, like every HF tool
            from easydata.io.hub import offline_hf_path

            pattern = offline_hf_path(pattern)
        fs, path = get_fs(pattern)
        if any(ch in path for ch in "*?[") and not _names_itself(fs, path):
            try:
                found = fs.glob(path, detail=True)  # each match's type from the listing, not a look each
                matches = sorted(p for p, info in found.items() if info.get("type") != "directory")
            except Exception as e:  # remote listing errors: one line, not a traceback
                raise InputError(f"cannot list '{pattern}': {e}") from None
            if not matches:
                raise InputError(f"data_files pattern '{pattern}' matches no file{_unexpanded(pattern)}")
            files.extend(_unstrip(fs, pattern, m) for m in matches)
            if _is_local(fs):
                facts.update((_unstrip(fs, pattern, m), (int(found[m]["size"]), _version(found[m])))
                             for m in matches if found[m].get("type") == "file" and not found[m].get("islink"))
        else:
            try:
                is_dir = fs.isdir(path)
                exists = is_dir or fs.exists(path)
            except Exception as e:
                raise InputError(f"cannot access '{pattern}': {e}") from None
            if not exists:
                raise InputError(f"data file '{pattern}' does not exist{_unexpanded(pattern)}")
            if is_dir:  # hidden files and directories (.git, .cache/huggingface of a snapshot) are no inputs
                root = path.rstrip("/")
                inner = sorted(p for p in fs.find(path)
                               if not any(part.startswith(".") for part in p[len(root):].split("/")))
                if not inner:
                    raise InputError(f"data directory '{pattern}' holds no file")
                found = [_unstrip(fs, pattern, m) for m in inner]
                files.extend(found)
                directories.update(dict.fromkeys(found, pattern))
            else:
                files.append(_unstrip(fs, pattern, path))
    seen: set[str] = set()
    files = [f for f in files if not (f in seen or seen.add(f))]
    files = _drop_unreadable_links(_drop_excluded(files, list(exclude_dirs), patterns, facts), facts)
    return ListedFiles(files, {f: facts[f] for f in files if f in facts},
                       {f: directories[f] for f in files if f in directories})


def _unexpanded(path: str) -> str:
    """A hint for a path that names an environment variable (`${DATA}`, `$DATA`): a config is read as written."""
    match = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", path)
    if match is None:
        return ""
    return (f" (configs are read as written: ${match.group(1)} is not expanded; expand it first, e.g. with"
            " envsubst, or pass the path with --set)")


def _names_itself(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    """Whether a path with glob characters names an existing file or directory as written (`data[v2].jsonl`,
    `what?.txt`): that one is read, as the user typed it, and never what the glob would match instead
    (`[v2]` is a character class: it matches `datav.jsonl`, never itself). A glob over such a name escapes
    the characters (`data[[]v2]/*.jsonl`), as Python's `glob.escape` does."""
    try:
        return bool(fs.exists(path))
    except Exception:  # a store that refuses the name as a key: it is a pattern
        return False


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return bool({"file", "local"} & set(protocols))


def _place(path: str, real_dirs: Callable[[str], str], regular: Container[str] = ()) -> tuple[Any, str]:
    """`path`'s filesystem protocol and its path there, local paths with links followed (`real_dirs`: a
    cached `os.path.realpath` of directories, as many files share one; `regular`: paths the listing showed
    are no links)."""
    fs, inner = get_fs(path)
    if local_path(path) is not None:
        head, name = os.path.split(inner)
        link = path not in regular and os.path.islink(inner)
        inner = os.path.realpath(inner) if link else os.path.join(real_dirs(head), name)
    return fs.protocol, inner


def _drop_excluded(files: list[str], exclude_dirs: list[str], patterns: Iterable[str],
                   regular: Container[str] = ()) -> list[str]:
    """`files` without those inside `exclude_dirs` (same filesystem; local paths compared after following
    links; `regular`: files the listing showed are regular files, not links)."""
    if not exclude_dirs:
        return files
    real_dirs = functools.lru_cache(maxsize=None)(os.path.realpath)
    places = [_place(d, real_dirs) for d in exclude_dirs]

    def inside(f: str) -> bool:
        protocol, path = _place(f, real_dirs, regular)
        return any(protocol == p and (path == d.rstrip("/") or path.startswith(d.rstrip("/") + "/"))
                   for p, d in places)

    kept = [f for f in files if not inside(f)]
    if len(kept) < len(files):
        print(f"easydata: warning: data_files {list(patterns)} match {len(files) - len(kept)} file(s) inside the"
              f" output directory {', '.join(map(repr, exclude_dirs))}; a run never reads its own output: skipped",
              file=sys.stderr)
        if not kept:
            raise InputError(f"data_files {list(patterns)} match only files inside the output directory")
    return kept


def _drop_unreadable_links(files: list[str], regular: Container[str] = ()) -> list[str]:
    """Only regular files are read: a local match that is not one once links are followed (a symlink loop,
    a broken link, a FIFO that would block forever, a device like `/dev/zero` that never ends, a socket)
    is skipped with one warning per kind (`regular`: files the listing showed are regular, not links)."""
    kinds: dict[str, list[str]] = {}
    for f in files:
        local = local_path(f)
        if local is None or f in regular:
            continue
        try:
            mode = os.stat(local).st_mode
        except OSError:
            kind = "link(s) that lead to no file (a loop or a broken link)" if os.path.islink(local) else None
        else:
            kind = None if stat.S_ISREG(mode) else \
                "special file(s) (a FIFO, device or socket: only regular files are read)"
        if kind is not None:
            kinds.setdefault(kind, []).append(f)
    bad = {f for group in kinds.values() for f in group}
    for kind, group in kinds.items():
        print(f"easydata: warning: skipping {len(group)} {kind}, e.g. '{group[0]}'", file=sys.stderr)
    if bad:
        files = [f for f in files if f not in bad]
        if not files:
            first = next(iter(kinds.values()))[0]
            raise InputError(f"data_files match only links that lead to no file or special files, e.g. '{first}'")
    return files


def compression_of(path: str) -> str | None:
    """The compression codec implied by a file name, or None."""
    for suffix, codec in _COMPRESSION_SUFFIXES.items():
        if path.lower().endswith(suffix):
            return codec
    return None


def strip_compression(path: str) -> str:
    """The file name without a compression suffix (`a.jsonl.gz` -> `a.jsonl`)."""
    for suffix in _COMPRESSION_SUFFIXES:
        if path.lower().endswith(suffix):
            return path[: -len(suffix)]
    return path


#: Compressed bytes decompressed to estimate a compressed file's decompressed size (`decompressed_size`).
SIZE_SAMPLE_BYTES = 4 * 2**20


def decompressed_size(path: str, size: int) -> int:
    """`size` bytes of the file at `path` once decompressed, estimated: `size` itself for a file that is not
    compressed, else `size` times the ratio of the file's whole decompressed size to its own (`size` may be a
    share of the file: a part of it read by one worker). The whole decompressed size is what the file says
    where it says it and that agrees with its start within a factor of 2 (gzip's trailer: the size modulo 4 GiB
    of its last member; zstd's frame header, when the writer recorded it), else its first `SIZE_SAMPLE_BYTES`
    decompressed (exact for a smaller file). A start that does not decompress gives `size`: reading the file
    reports it."""
    codec = compression_of(path)
    if codec is None:
        return size
    try:
        import bz2
        import lzma
        import zlib

        with open_file(path, "rb", decompress=False) as f:
            raw = f.read(SIZE_SAMPLE_BYTES)
            file_size = f.seek(0, os.SEEK_END)
            trailer = b""
            if codec == "gzip" and file_size >= 4:
                f.seek(file_size - 4)
                trailer = f.read(4)
        if codec == "zstd":
            import zstandard

            decoder: Callable[[], Any] = lambda: zstandard.ZstdDecompressor().decompressobj()  # noqa: E731
            declared = zstandard.frame_content_size(raw)
        else:
            decoder = {"gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), "bz2": bz2.BZ2Decompressor,
                       "xz": lzma.LZMADecompressor}[codec]
            declared = int.from_bytes(trailer, "little") if len(trailer) == 4 else -1
        out = _decompressed_bytes(raw, decoder)
        if len(raw) >= file_size:  # decompressed whole
            return int(size * out / max(file_size, 1))
        estimate = file_size * out / max(len(raw), 1)
        if codec == "gzip" and declared >= 0:  # the trailer's size plus the multiple of 4 GiB nearest the estimate
            declared += round((estimate - declared) / 2**32) * 2**32
        if declared > 0 and estimate / 2 <= declared <= estimate * 2:  # else the trailer of a last member of
            estimate = declared  # many, or a first frame's own size: not the file's
        return int(size * estimate / file_size)
    except Exception:  # noqa: BLE001 - a corrupt start: reading the file reports it
        return size


def _decompressed_bytes(raw: bytes, decoder: Callable[[], Any]) -> int:
    """The bytes `raw` decompresses to, across the frames or members it holds (a decompressor stops at the end
    of one: pzstd's files open with a skippable frame, which gave 0, and a bgzip file's first member is 64 KiB
    of its whole), each from a new `decoder()`."""
    out = 0
    while raw:
        one = decoder()
        out += len(one.decompress(raw))
        if not one.eof:
            break
        raw = one.unused_data
    return out


def special_file(path: str) -> str | None:
    """What a local path is when it exists but is neither a regular file nor a directory once links are
    followed ("a FIFO", "a device", "a socket"), else None. Opening one for reading would block forever
    (a FIFO with no writer) or never end (`/dev/zero`); URLs of other stores have no such files."""
    local = local_path(path)
    if local is None:
        return None
    try:
        mode = os.stat(local).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def refuse_special(path: str) -> None:
    """Raises `InputError` (one line) when `path` is a special file (`special_file`)."""
    kind = special_file(path)
    if kind is not None:
        raise InputError(f"'{path}' is {kind}, not a regular file; refusing to read it")


def open_regular(fs: fsspec.AbstractFileSystem, path: str, mode: str = "rb") -> IO:
    """`fs.open(path, mode)` for reading a file the tool itself wrote (a manifest, a lock, a journal), refusing
    a special file put in its place (`refuse_special`) instead of blocking on it."""
    if _is_local(fs):  # (another store's stripped path is no local path)
        refuse_special(path)
    return fs.open(path, mode)


#: The smallest read-ahead block of a remote split (`open_file(read_bytes=...)`).
MIN_READ_AHEAD = 1 << 20
#: The largest read-ahead block of a remote split (fsspec's stores hold one block in memory per open file).
MAX_READ_AHEAD = 64 << 20
#: What a remote split's read-ahead block holds past the split: the line that crosses its end (a longer one
#: costs one more block).
READ_AHEAD_TAIL = 256 << 10
#: How a remote Parquet or Arrow file is read (`open_arrow_file`): pyarrow asks for the footer and then whole
#: column chunks or record batches at known offsets, so each read is one ranged request for what it asks
#: ("none": no read-ahead); with the store's default read-ahead (s3fs: 50 MB past each read) every work unit of a
#: file read on to its end, and 7 units of an 11 MB Parquet object fetched 40.9 MB.
REMOTE_TABLE_CACHE = "none"


def open_file(path: str, mode: str = "rb", *, decompress: bool = True, compression: str | None = None,
              buffer_size: int = -1, read_bytes: int | None = None) -> IO:
    """Opens a local path or URL.

    Reading transparently decompresses `.gz/.zst/.bz2/.xz` (unless `decompress=False`); writing
    compresses with `compression` (an fsspec codec name such as `gzip` or `zstd`) when given. A special
    file (a FIFO, a device) is refused for reading (`refuse_special`). `buffer_size` is the read buffer of
    a local file or a decompressed stream opened `rb` (-1: Python's default, 8 KiB; a reader of long lines
    asks for more, `input_formats.lines`); an object store's file keeps its own buffering. `read_bytes`: the
    bytes the caller reads from where it seeks (a split's size); an uncompressed remote file then reads
    ahead that much plus `READ_AHEAD_TAIL` past its first read (fsspec's read-ahead fetches a read plus a
    block), so that a split downloads its range, its last line and one read buffer: with the store's default
    block (s3fs reads 50 MB ahead) each split of a file read on to the block's end (`bench_remote_reads.py`:
    the 12 splits of the 48 MB corpus fetched 6.5 times its size).
    """
    if "r" in mode:
        refuse_special(path)
    if compression is None and decompress and "r" in mode:
        compression = compression_of(path)
    local = _plain_local(path)
    try:
        if local is not None and mode == "rb" and compression is None:
            # the file itself, as fsspec's local opener would open it, without its URL resolution (~70 us of
            # Python per file: a dataset of 100,000 small files opens each)
            return open(local, "rb", buffering=buffer_size)
        if compression == "zstd" and mode == "rb":
            # fsspec's python-zstandard fallback returns a stream reader that cannot be iterated by
            # line (io.UnsupportedOperation); buffering it gives the full file-object interface.
            raw = fsspec.open(path, "rb").open()
            return io.BufferedReader(_CheckedZstdReader(raw), buffer_size if buffer_size > 0 else io.DEFAULT_BUFFER_SIZE)
        if read_bytes is not None and compression is None and mode == "rb":
            fs, inner = get_fs(path)
            return fs.open(inner, "rb", block_size=min(MAX_READ_AHEAD, max(read_bytes + READ_AHEAD_TAIL, MIN_READ_AHEAD)))
        opened = fsspec.open(path, mode, compression=compression).open()
        if compression is not None and mode == "rb" and buffer_size > 0 and hasattr(opened, "read1"):
            return io.BufferedReader(_OneReadAtATime(opened), buffer_size)
        return opened
    except FileNotFoundError:
        raise InputError(f"file '{path}' does not exist") from None
    except (ImportError, ValueError) as e:
        raise InputError(f"cannot open '{path}': {e}") from None


class _OneReadAtATime(io.RawIOBase):
    """A decompressing stream (`gzip`, `bz2`, `lzma`: their own 8 KiB buffer) as a raw stream whose every read
    is one `read1`, so that a larger buffer over it can be filled (`open_file(buffer_size=...)`) and the
    stream's EOFError at a truncated end still comes only from a read that found no data: the lines before
    the cut are read, as through the stream's own buffer (a buffer over the stream itself fills by reading
    until full, and an error then loses what it had read)."""

    def __init__(self, stream: IO):
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read1(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


class _CheckedZstdReader(io.RawIOBase):
    """A zstd stream decompressed frame by frame that raises EOFError when its input ends inside a frame.

    python-zstandard's own stream reader ends quietly at a cut: a truncated download would read as a
    shorter, complete file. Input is fed in small pieces so a highly compressed block cannot expand
    into more than a few hundred MB at once.
    """

    _CHUNK = 1 << 14

    def __init__(self, raw: IO):
        import zstandard

        self._raw, self._zstd = raw, zstandard
        self._decoder: Any = None
        self._pending = b""  # input after the end of a frame: the start of the next one
        self._out, self._at = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._at >= len(self._out):
            data = self._pending or self._raw.read(self._CHUNK)
            self._pending = b""
            if not data:
                if self._decoder is not None:
                    raise EOFError("zstd stream ended before the end of its frame (the file is truncated)")
                return 0
            if self._decoder is None:
                self._decoder = self._zstd.ZstdDecompressor().decompressobj()
            self._out, self._at = self._decoder.decompress(data), 0
            if self._decoder.eof:
                self._pending, self._decoder = self._decoder.unused_data, None
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at:self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def file_head(path: str, size: int) -> bytes:
    """The first `size` bytes of a file as stored (not decompressed), in one small read (a ranged request on an
    object store, not a read-ahead block of megabytes)."""
    local = local_path(path)
    if local is not None:
        with open(local, "rb", buffering=0) as f:  # no read-ahead buffer for a few bytes
            return f.read(size)
    fs, inner = get_fs(path)
    return fs.cat_file(inner, start=0, end=size)  # by name: s3fs takes `version_id` second


def read_bytes(path: str) -> bytes:
    """A (possibly remote or compressed) file's bytes; raises `OSError` or `EasyDataError` (an unknown
    protocol) for the caller to word."""
    with open_file(path, "rb") as f:
        return f.read()


def read_text(path: str) -> str:
    """A (possibly remote or compressed) file's text, as UTF-8; raises `OSError`, `UnicodeDecodeError` or
    `EasyDataError` (an unknown protocol) for the caller to word."""
    return read_bytes(path).decode("utf-8")


def local_path(path: str) -> str | None:
    """The local filesystem path of `path` (plain or `file://`), or None for any other URL."""
    if "://" not in path:
        return path
    if path.startswith("file://"):
        return path[len("file://"):]
    return None


def staging_ipc_options() -> Any:
    """How staged Arrow IPC files (checkpointed and packed batches) are written: LZ4-compressed, on the
    writing thread (workers already use every core): token columns shrink several-fold at GB/s, so a run
    writes and reads far fewer staged bytes (measured: docs/performance.md). Readers need no setting: the
    codec is in the file."""
    import pyarrow as pa

    return pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)


def open_arrow_file(path: str, mode: str = "rb") -> IO:
    """Opens an uncompressed file for pyarrow: a native (memory-mapped when reading) file for local
    paths, an fsspec file object for remote URLs (read without read-ahead: `REMOTE_TABLE_CACHE`).

    Native files keep pyarrow's I/O off the Python interpreter (faster, and no Python file objects
    finalised by C++ threads at interpreter exit).
    """
    import pyarrow as pa

    local = local_path(path)
    if local is None:
        if mode != "rb":
            return open_file(path, mode, decompress=False)
        refuse_special(path)
        fs, inner = get_fs(path)
        try:
            return fs.open(inner, "rb", cache_type=REMOTE_TABLE_CACHE)
        except FileNotFoundError:
            raise InputError(f"file '{path}' does not exist") from None
    try:
        if "r" in mode:
            refuse_special(path)
            return pa.memory_map(local, "r")
        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        return pa.OSFile(local, "wb")
    except FileNotFoundError:
        raise InputError(f"file '{path}' does not exist") from None


def file_version(path: str) -> str:
    """What identifies this content of a file without reading it: GCS's generation, else the size, ETag
    and modification time (S3: its listing has no `VersionId`, see `_version`; local disks: no ETag)."""
    return file_facts(path)[1]


def file_facts(path: str) -> tuple[int, str]:
    """A file's size and `file_version`, from one look at it (one request on an object store)."""
    local = _plain_local(path)
    if local is not None:  # one `stat`, giving what fsspec's `LocalFileSystem.info` gives (links followed)
        st = os.stat(local)
        info = {"size": st.st_size, "mtime": st.st_mtime, "created": getattr(st, "st_birthtime", st.st_ctime)}
    else:
        fs, inner = get_fs(path)
        try:
            info = fs.info(inner)
        except PermissionError as e:  # a store's 403 names no file: say which (`EnvironmentFailure.of`)
            raise PermissionError(e.errno, e.strerror or str(e), e.filename or path) from e
    if info.get("size") is None:  # an HTTP server that sends no Content-Length (a stream made as it is sent)
        raise InputError(f"'{path}' has no known size: its server does not say it (no Content-Length), and"
                         " planning cuts an input by its size; download it and give the local copy")
    return int(info["size"]), _version(info)


def _plain_local(path: str) -> str | None:
    """The local path of a plain local path or `file://` URL that the OS opens as fsspec would (not a chain
    of file systems, `::`; not a `~` path, which fsspec expands), else None: what the local fast paths of
    `open_file` and `file_facts` take."""
    local = local_path(path)
    if local and os.sep == "/" and "::" not in local and not local.startswith("~"):
        return local
    return None


def _version(info: dict[str, Any]) -> str:
    # Only what an object store's listing and a look at the object both give: planning may take it from
    # a glob's listing (s3fs and gcsfs keep it and answer `info` from it) and a worker from a look. S3's
    # `VersionId` is in a look (HEAD) at a versioned bucket's object and not in its listing, so it is left
    # out: the ETag, size and time change with the object's bytes all the same.
    for key in ("generation", "version_id"):
        if info.get(key):
            return f"{key}={info[key]}"
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("crc32c")
    modified = info.get("mtime") or info.get("LastModified") or info.get("updated") or info.get("created")
    return f"size={info.get('size')}" + (f",etag={tag}" if tag else "") + (f",modified={modified}" if modified else "")


def temp_name(path: str) -> str:
    """A name beside `path` no other attempt uses: runners may run a retried or duplicate attempt of a
    step at the same time, and each must write its own file before the rename."""
    import uuid

    return f"{path}.tmp-{uuid.uuid4().hex[:12]}"


def write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` through a temporary name and a rename: readers and other attempts see
    the old file or the whole new one, never part of one. Safe to run twice or at once."""
    fs, target = get_fs(path)
    fs.makedirs(posixpath.dirname(target), exist_ok=True)
    temp = temp_name(target)
    with fs.open(temp, "wb") as f:
        f.write(data)
    fs.mv(temp, target)


def require_bucket(url: str) -> None:
    """Raises `OutputError` when `url` lies in a bucket (`s3://`, `gs://`, any file system that splits a path
    into a bucket and a key) that does not exist or these credentials cannot see. fsspec's `makedirs` creates a
    missing bucket (s3fs and gcsfs do), so an output with a mistyped bucket made a new bucket in the account,
    under a name anyone may take; easydata creates none. Called before an output is first written."""
    fs, inner = get_fs(url)
    split_path = getattr(fs, "split_path", None)
    if _is_local(fs) or split_path is None:
        return
    bucket = split_path(inner)[0]
    # The output itself first: a look at a key raises what keeps the client from the store (no credentials,
    # an endpoint that does not answer), where s3fs's look at a bucket says only False.
    if bucket and not fs.exists(inner) and not fs.exists(bucket):
        raise OutputError(f"output '{url}': bucket '{bucket}' does not exist, or these credentials cannot see it;"
                          " easydata creates no bucket: create it (or fix the name) and run again")


def remove_file(path: str) -> None:
    """Deletes a file if it is there (safe to run twice: a retried step removes what a first attempt did)."""
    fs, inner = get_fs(path)
    try:
        fs.rm_file(inner)
    except FileNotFoundError:
        pass


def file_size(path: str) -> int:
    fs, inner = get_fs(path)
    return int(fs.size(inner))


def join(base: str, *parts: str) -> str:
    """Joins path components onto a local path or URL with `/`."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out
