"""`format: megatron`: Megatron-LM's indexed dataset (`.bin` + `MMIDIDX` `.idx`), checked with an
independent reader written here from the format's description, and with Megatron-LM's own
`megatron.core.datasets.indexed_dataset.IndexedDataset` (the real `megatron-core` package, with torch,
installed beside the test environment)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from easydata.io.formats import token_list_array
from easydata.io.token_files import MegatronShardWriter
from tests.conftest import REPO_ROOT, make_texts, pip_site, write_jsonl

pytestmark = pytest.mark.heavy

MEGATRON_CORE = "megatron-core==0.16.1"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def read_indexed_dataset(prefix: str) -> list[list[int]]:
    """An independent reader of Megatron's format: header, lengths, pointers, document indices."""
    index = Path(prefix + ".idx").read_bytes()
    assert index[:9] == b"MMIDIDX\x00\x00" and struct.unpack_from("<Q", index, 9) == (1,)
    code, sequences, documents = struct.unpack_from("<BQQ", index, 17)
    lengths = np.frombuffer(index, np.int32, sequences, 34)
    pointers = np.frombuffer(index, np.int64, sequences, 34 + 4 * sequences)
    doc_index = np.frombuffer(index, np.int64, documents, 34 + 12 * sequences)
    assert len(index) == 34 + 12 * sequences + 8 * documents
    assert doc_index[0] == 0 and doc_index[-1] == sequences
    if os.path.getsize(prefix + ".bin") == 0:
        return [[] for _ in range(sequences)]
    data = np.memmap(prefix + ".bin", dtype=DTYPES[code], mode="r")
    itemsize = np.dtype(DTYPES[code]).itemsize
    return [data[p // itemsize:p // itemsize + n].tolist() for p, n in zip(pointers, lengths)]


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.lists(st.integers(0, 70_000), min_size=0, max_size=20), max_size=25),
       wide=st.booleans(), batch=st.integers(1, 7))
def test_writer_round_trips_through_an_independent_reader(tmp_path_factory, docs, wide, batch) -> None:
    vocab_ids = [[t % (70_000 if wide else 65_536) for t in d] for d in docs]
    path = str(tmp_path_factory.mktemp("m") / "part-00000-of-00001.bin")
    writer = MegatronShardWriter(path, pa.schema([("input_ids", pa.list_(pa.int32()))]),
                                 "uint32" if wide else "uint16")
    for first in range(0, len(vocab_ids), batch):
        chunk = vocab_ids[first:first + batch]
        flat = np.array([t for d in chunk for t in d], dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in chunk])]).astype(np.int64)
        writer.write(pa.table({"input_ids": token_list_array(flat, offsets)}))
    assert writer.close() == len(vocab_ids)
    assert read_indexed_dataset(path[:-4]) == vocab_ids
    code = struct.unpack_from("<B", Path(path[:-4] + ".idx").read_bytes(), 17)[0]
    assert code == (4 if wide else 8)  # int32 or uint16, Megatron's codes


def _run(tmp_path: Path, tokenizer: Path, fmt: str, out: str) -> Path:
    config = {"default_tokenizer": str(tokenizer), "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl")}],
              "save": {"output_dir": str(tmp_path / out), "format": fmt, "num_shards": 2}}
    (tmp_path / f"{out}.json").write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(tmp_path / f"{out}.json"), "--quiet",
                           "--direct_num_workers=1"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    checked = subprocess.run([sys.executable, "-m", "easydata", "validate", str(tmp_path / out)], capture_output=True,
                             text=True, timeout=300, env=env)
    assert checked.returncode == 0, checked.stdout
    return tmp_path / out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, mistral_tokenizer_dir) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("megatron")
    write_jsonl(tmp / "a.jsonl", ({"text": t} for t in make_texts(400, seed=4)))
    return _run(tmp, mistral_tokenizer_dir, "megatron", "meg"), _run(tmp, mistral_tokenizer_dir, "parquet", "pq")


def test_cli_writes_the_same_documents_as_parquet(outputs) -> None:
    meg, parquet = outputs
    manifest = json.loads((meg / "manifest.json").read_text())
    shards = manifest["datasets"]["web"]["shards"]
    assert [s["path"] for s in shards] == ["web/part-00000-of-00002.bin", "web/part-00001-of-00002.bin"]
    assert all(s["index_path"].endswith(".idx") for s in shards) and manifest["schema"]["token_dtype"] == "uint16"
    for shard in shards:
        expected = pq.read_table(parquet / shard["path"].replace(".bin", ".parquet")).column("input_ids").to_pylist()
        assert read_indexed_dataset(str(meg / shard["path"][:-4])) == expected  # same rows, same order


def test_megatron_core_reads_our_files(outputs, tmp_path) -> None:
    """Megatron-LM's own reader (`IndexedDataset`, as GPTDataset builds on it) gives our documents."""
    from tests.test_torch import TORCH_VERSION

    sites = [pip_site(MEGATRON_CORE, no_deps=True), pip_site(f"torch=={TORCH_VERSION}")]
    meg, parquet = outputs
    manifest = json.loads((meg / "manifest.json").read_text())
    relative = [s["path"][:-4] for s in manifest["datasets"]["web"]["shards"]]
    prefixes = [str(meg / r) for r in relative]
    script = ("import json, sys, warnings\nwarnings.simplefilter('ignore')\n"
              "from megatron.core.datasets.indexed_dataset import IndexedDataset\n"
              "out = []\n"
              "for prefix in json.loads(sys.argv[1]):\n"
              "    ds = IndexedDataset(prefix)\n"
              "    out.append([ds[i].tolist() for i in range(len(ds))] + [ds.document_indices.tolist()])\n"
              "print(json.dumps(out))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, sites))}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(prefixes)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    for shard, docs in zip(relative, read):
        expected = pq.read_table(parquet / f"{shard}.parquet").column("input_ids").to_pylist()
        assert docs[:-1] == expected and docs[-1] == list(range(len(expected) + 1))
