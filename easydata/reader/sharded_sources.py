"""EasyData's `ShardedDataSource` family: files, easydata outputs, Hub datasets, `datasets` objects.

A file source's shards are its files (a path, glob or list; any fsspec URL), opened lazily as
iterators of row dicts one record batch (or line) at a time. `ParquetShardedSource` and
`ArrowShardedSource` also take an easydata output directory and read it through its manifest (its
shards only, never `manifest.json` or dead letters; `name=` picks one dataset). Nothing here imports
Apache Beam.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Sequence

from easydata.errors import InputError
from easydata.core.protocols import ShardedDataSource, ShardInfo, start_row
from easydata.io.field_values import python_rows
from easydata.io.filesystems import expand_data_files, file_size, get_fs, join, open_file, strip_compression
from easydata.io.formats import iter_shard_batches
from easydata.io.sources import infer_type
from easydata.run.manifest import MANIFEST_NAME, member_path, read_manifest

__all__ = ["FileShardedSource", "ParquetShardedSource", "ArrowShardedSource", "JsonShardedSource",
           "CsvShardedSource", "TextShardedSource", "OutputShardedSource", "FilesBackedSource", "HuggingFaceShardedSource",
           "HFDatasetShardedSource", "source_for_files"]


def _is_output(path: str) -> bool:
    """`path` is a directory holding an easydata manifest."""
    fs, inner = get_fs(path)
    try:
        return fs.isdir(inner) and fs.exists(join(inner, MANIFEST_NAME))
    except Exception:  # a glob or an unreachable URL: not an output directory
        return False


class FileShardedSource(ShardedDataSource):
    """Rows of files, one shard per file; subclasses say how a file becomes row dicts."""

    def __init__(self, data_files: str | Sequence[str], *, name: Optional[str] = None):
        self.data_files, self.name = data_files, name
        self._listed: Optional[tuple[list[str], dict[str, Optional[int]]]] = None
        if isinstance(data_files, str) and _is_output(data_files):
            self._list()  # an output directory: its manifest is read now (a wrong `name` fails here)

    def _list(self) -> tuple[list[str], dict[str, Optional[int]]]:
        """The shards (and their row counts when a manifest says), found on first use."""
        if self._listed is None:
            data_files, name = self.data_files, self.name
            if isinstance(data_files, str) and _is_output(data_files):
                manifest = read_manifest(data_files)
                outputs = [manifest.output(name, data_files)] if name is not None else sorted(manifest.outputs.items())
                rows = {member_path(data_files, shard.path, "shard path"): shard.rows
                        for _, output in outputs for shard in output.shards}
                self._listed = (list(rows), rows)
            else:
                files = expand_data_files([data_files] if isinstance(data_files, str) else list(data_files))
                self._listed = (files, {})
        return self._listed

    @property
    def shard_names(self) -> list[str]:
        return self._list()[0]

    @property
    def _rows(self) -> dict[str, Optional[int]]:
        return self._list()[1]

    def _check(self, shard_name: str) -> None:
        if shard_name not in self.shard_names:
            raise ValueError(f"unknown shard {shard_name!r}; see shard_names")

    def open_shard(self, shard_name: str) -> Iterator[dict[str, Any]]:
        return self.open_shard_at_row(shard_name, 0)

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict[str, Any]]:
        self._check(shard_name)
        return self._rows_from(shard_name, start_row(row))

    def _rows_from(self, path: str, row: int) -> Iterator[dict[str, Any]]:
        rows = self._read(path)
        for _ in range(row):
            if next(rows, None) is None:
                break
        return rows

    def _read(self, path: str) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def get_shard_info(self, shard_name: str) -> Optional[ShardInfo]:
        self._check(shard_name)
        return ShardInfo(self.shard_names.index(shard_name), shard_name, num_rows=self._rows.get(shard_name),
                         byte_size=file_size(shard_name), url=shard_name)

    def __len__(self) -> int:
        if self._rows and all(n is not None for n in self._rows.values()):
            return sum(self._rows.values())
        return super().__len__()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.data_files!r})"


class _BatchFileSource(FileShardedSource):
    """Parquet / Arrow: rows come from record batches, and earlier batches are skipped undecoded."""

    fmt = ""

    def _rows_from(self, path: str, row: int) -> Iterator[dict[str, Any]]:
        seen = 0
        for batch in iter_shard_batches(path, self.fmt):
            if seen + batch.num_rows <= row:
                seen += batch.num_rows
                continue
            yield from python_rows(batch.slice(max(row - seen, 0)))
            seen += batch.num_rows


class ParquetShardedSource(_BatchFileSource):
    """Parquet files (a path, glob or list; any fsspec URL), or an easydata Parquet output directory."""

    fmt = "parquet"


class ArrowShardedSource(_BatchFileSource):
    """Arrow IPC files, or an easydata Arrow output directory."""

    fmt = "arrow"


class OutputShardedSource(_BatchFileSource):
    """An easydata output directory in any of its formats (the manifest says which): its shards,
    read by the format's own reader (`easydata.io.formats.SHARD_FORMATS`)."""

    def __init__(self, output_dir: str, *, name: Optional[str] = None):
        super().__init__(output_dir, name=name)
        self.fmt = read_manifest(output_dir).get("format", "parquet")


class JsonShardedSource(FileShardedSource):
    """JSON Lines files (`.jsonl`, `.json` with one object per line, `.json` holding one array, or JSON values
    spread over lines: a pretty-printed object, or several as `jq` prints them);
    `.gz/.zst/.bz2` are decompressed on the fly. A line that is not JSON raises, naming file and line."""

    def _read(self, path: str) -> Iterator[dict[str, Any]]:
        with open_file(path) as f:
            if not strip_compression(path).lower().endswith(".json"):
                for line_no, line in enumerate(f, start=1):
                    yield from self._parse(path, line_no, line)
                return
            data = f.read()  # a `.json` file may be one array: it is read whole either way
        data = data.removeprefix(b"\xef\xbb\xbf")
        if data.lstrip().startswith(b"["):
            yield from json.loads(data)
            return
        first = next((line for line in data.splitlines() if line.strip()), b"{}")
        try:
            json.loads(first)
        except ValueError:  # no JSON line: JSON values spread over lines (pretty-printed, as jq prints them)?
            if data.lstrip().startswith(b"{"):
                yield from self._values(path, data.decode("utf-8"))
                return
        for line_no, line in enumerate(data.splitlines(), start=1):
            yield from self._parse(path, line_no, line)

    @staticmethod
    def _values(path: str, text: str) -> Iterator[Any]:
        """The JSON values of `text`, one after another (the pipeline's reader takes such a `.json` file so)."""
        decoder, pos = json.JSONDecoder(), 0
        while True:
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos == len(text):
                return
            try:
                value, pos = decoder.raw_decode(text, pos)
            except ValueError as e:
                raise ValueError(f"{path}: not JSON lines, a JSON array or JSON values ({e})") from None
            yield value

    @staticmethod
    def _parse(path: str, line_no: int, line: bytes) -> Iterator[dict[str, Any]]:
        if not line.strip():
            return
        try:
            yield json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{line_no}: not a JSON line ({e})") from None


class CsvShardedSource(FileShardedSource):
    """CSV (or `.tsv`) files with a header row; values are read as strings, as EasyData's reader does."""

    def _read(self, path: str) -> Iterator[dict[str, Any]]:
        import csv
        import io

        delimiter = "\t" if strip_compression(path).lower().endswith(".tsv") else ","
        with open_file(path) as f:
            yield from csv.DictReader(io.TextIOWrapper(f, encoding="utf-8-sig", newline=""), delimiter=delimiter)


class TextShardedSource(FileShardedSource):
    """Plain text files: one row `{"text": line}` per line (without its newline)."""

    def __init__(self, data_files: str | Sequence[str], *, text_field: str = "text", **kwargs: Any):
        super().__init__(data_files, **kwargs)
        self.text_field = text_field

    def _read(self, path: str) -> Iterator[dict[str, Any]]:
        with open_file(path) as f:
            for line in f:
                yield {self.text_field: line.decode("utf-8").rstrip("\r\n")}


_BY_TYPE = {"parquet": ParquetShardedSource, "arrow": ArrowShardedSource, "jsonl": JsonShardedSource,
            "json": JsonShardedSource, "csv": CsvShardedSource, "txt": TextShardedSource}


def source_for_files(data_files: str | Sequence[str], kind: Optional[str] = None) -> FileShardedSource:
    """The source class for these files: `kind` (a `DatasetConfig.type`), else the first file's extension."""
    if kind is None:
        first = data_files if isinstance(data_files, str) else data_files[0]
        try:
            kind = infer_type(first)  # from the pattern itself: nothing is listed yet (the one rule: io.sources)
        except InputError:
            return _AnyFormatSource(data_files)  # each file's own extension decides, when it is read
    return _BY_TYPE[kind](data_files)


class _AnyFormatSource(FileShardedSource):
    """Files whose format shows only in their names once listed: each is read by its extension."""

    def _rows_from(self, path: str, row: int) -> Iterator[dict[str, Any]]:
        return _BY_TYPE[infer_type(path)]([path])._rows_from(path, row)


class FilesBackedSource(ShardedDataSource):
    """A source whose files are found on first use (`files`): a Hub dataset, a job's output."""

    @property
    def files(self) -> FileShardedSource:
        raise NotImplementedError

    @property
    def shard_names(self) -> list[str]:
        return self.files.shard_names

    def open_shard(self, shard_name: str) -> Iterator[dict[str, Any]]:
        return self.files.open_shard(shard_name)

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict[str, Any]]:
        return self.files.open_shard_at_row(shard_name, row)


class HuggingFaceShardedSource(FilesBackedSource):
    """A Hugging Face Hub dataset: its data files of `split`, one shard per file, read like local files.

    The files are found and downloaded with `huggingface_hub` into the standard cache (read from the
    cache alone with `HF_HUB_OFFLINE=1`), on first use. `streaming` is accepted: rows are always
    streamed from the files, never loaded whole.
    """

    def __init__(self, dataset_name: str, split: str = "train", streaming: bool = True,
                 revision: Optional[str] = None, **kwargs: Any):
        self.dataset_name, self.split, self.streaming, self.revision = dataset_name, split, streaming, revision
        self._files: Optional[FileShardedSource] = None

    @property
    def files(self) -> FileShardedSource:
        if self._files is None:
            from easydata.io.hub import resolve_hub_dataset

            self._files = source_for_files(resolve_hub_dataset(self.dataset_name, self.split, self.revision))
        return self._files

    def __repr__(self) -> str:
        return f"HuggingFaceShardedSource({self.dataset_name!r}, split={self.split!r})"


class HFDatasetShardedSource(ShardedDataSource):
    """A `datasets.Dataset` or `IterableDataset` as a sharded source (its own shards when it has several)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        count = getattr(dataset, "num_shards", None)
        if count is None:
            count = getattr(dataset, "n_shards", 1)
        self._count = max(int(count or 1), 1)

    @property
    def shard_names(self) -> list[str]:
        return [f"shard_{i:05d}" for i in range(self._count)]

    def _part(self, shard_name: str) -> Any:
        if shard_name not in self.shard_names:
            raise ValueError(f"unknown shard {shard_name!r}; see shard_names")
        if self._count == 1:
            return self.dataset
        return self.dataset.shard(num_shards=self._count, index=self.shard_names.index(shard_name))

    def open_shard(self, shard_name: str) -> Iterator[dict[str, Any]]:
        return iter(self._part(shard_name))

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict[str, Any]]:
        part, row = self._part(shard_name), start_row(row)
        if hasattr(part, "skip"):
            return iter(part.skip(row))
        return iter(part.select(range(row, len(part))))

    def __len__(self) -> int:
        try:
            return len(self.dataset)
        except TypeError:
            return super().__len__()
