"""Bytes an object store sends for reading one input file, against the file's size: does every work unit of a
remote file download its own range, and only that?

A moto S3 server on 127.0.0.1 (`moto[server]`, in the test extras) holds the 48 MB benchmark corpus as one
JSON lines object, as Parquet (row groups of 500 documents, zstd) and as an Arrow IPC file (batches of 500).
For each, `easydata.io.sources` plans the work units as a run does and `read_splits` reads every one of them in
this process; s3fs's ranged GETs (`S3File._fetch_range`) are counted. The baseline is the object's size: 1.00x
is each byte fetched once. Two store settings are measured in the same run: ours (a split reads ahead its own
size, a table input reads no further than pyarrow asks: `easydata.io.filesystems.open_file` /
`open_arrow_file`) and s3fs's default block (50 MB of read-ahead), which the reads used before.

Usage, from the repository root: python benchmarks/bench_remote_reads.py [--size-mb 48] [--workdir DIR].
It is a benchmark, not a test (the test suite holds the bound: `tests/test_s3.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_pipeline as bp  # noqa: E402  (the corpus)


@contextlib.contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """A moto S3 server on a free local port; yields its endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(timeout=30)


def objects(corpus: Path) -> dict[str, bytes]:
    """The corpus as one JSON lines, one Parquet and one Arrow IPC object."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = corpus.read_bytes()
    table = pa.table({"text": [json.loads(line)["text"] for line in jsonl.splitlines() if line.strip()]})
    parquet, arrow = io.BytesIO(), io.BytesIO()
    pq.write_table(table, parquet, row_group_size=500, compression="zstd")
    with pa.ipc.new_file(arrow, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=500):
            writer.write_batch(batch)
    return {"jsonl": jsonl, "parquet": parquet.getvalue(), "arrow": arrow.getvalue()}


def measure(kind: str, url: str, store_default: bool) -> dict[str, Any]:
    """Every work unit of `url` read as a run reads it; the bytes and requests s3fs fetched."""
    import fsspec
    import s3fs

    from easydata.config import DatasetConfig
    from easydata.io import filesystems
    from easydata.io.sources import plan_input, read_splits, work_units

    fetched = {"bytes": 0, "requests": 0}
    original = s3fs.core.S3File._fetch_range

    def counted(self, start, end):
        fetched["bytes"] += end - start
        fetched["requests"] += 1
        return original(self, start, end)

    saved = filesystems.MIN_READ_AHEAD, filesystems.MAX_READ_AHEAD, filesystems.REMOTE_TABLE_CACHE
    if store_default:  # s3fs's own block and read-ahead, as every read had them before
        default = s3fs.S3FileSystem.default_block_size
        filesystems.MIN_READ_AHEAD = filesystems.MAX_READ_AHEAD = default
        filesystems.REMOTE_TABLE_CACHE = "readahead"
    s3fs.core.S3File._fetch_range = counted
    try:
        dataset = DatasetConfig(name="d", data_files=url, type=kind)
        plan = plan_input(dataset)
        units = work_units(dataset, plan.splits, plan.split_bytes)
        fsspec.filesystem("s3").invalidate_cache()
        fetched.update(bytes=0, requests=0)
        began = time.perf_counter()
        documents = sum(len(batch.texts) for unit in units for batch in read_splits(unit, dataset))
        seconds = time.perf_counter() - began
    finally:
        s3fs.core.S3File._fetch_range = original
        filesystems.MIN_READ_AHEAD, filesystems.MAX_READ_AHEAD, filesystems.REMOTE_TABLE_CACHE = saved
    return {**fetched, "units": len(units), "documents": documents, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=48)
    parser.add_argument("--workdir", type=Path, default=bp.REPO_ROOT / "benchmarks" / "_work")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus, _ = bp.ensure_corpus(args.workdir, args.size_mb)
    with moto_server(args.workdir / "moto-remote-reads.log") as endpoint:
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                          AWS_ENDPOINT_URL=endpoint)
        import boto3

        client = boto3.client("s3")
        client.create_bucket(Bucket="bench")
        print(f"{corpus.name}: bytes fetched from S3 (moto) to read every work unit once, / the object's size")
        print(f"{'input':<8} {'object':>9} {'units':>5} {'ours: fetched':>14} {'requests':>8} {'ratio':>6}"
              f" {'s3fs default: fetched':>22} {'requests':>8} {'ratio':>6}")
        for kind, data in objects(corpus).items():
            client.put_object(Bucket="bench", Key=f"corpus.{kind}", Body=data)
            url = f"s3://bench/corpus.{kind}"
            ours, default = measure(kind, url, False), measure(kind, url, True)
            if ours["documents"] != default["documents"]:
                raise SystemExit(f"bench: {kind}: {ours['documents']} documents against {default['documents']}")
            print(f"{kind:<8} {len(data) / 1e6:>7.1f}MB {ours['units']:>5} {ours['bytes'] / 1e6:>12.1f}MB"
                  f" {ours['requests']:>8} {ours['bytes'] / len(data):>5.2f}x {default['bytes'] / 1e6:>20.1f}MB"
                  f" {default['requests']:>8} {default['bytes'] / len(data):>5.2f}x")


if __name__ == "__main__":
    main()
