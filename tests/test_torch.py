"""PyTorch trains on our rows: `TokenReader(layout="hf", dtype="int64")` under a torch `DataLoader`.

The real `torch` package (CPU build) is installed once with pip into a cached directory
(`$EASYDATA_TEST_VENVS`, default `~/.cache/easydata-test-venvs`) that the training script appends to its
`sys.path`: torch is not a dependency of the project or of its test extra (a Linux `pip install torch`
pulls several GB of CUDA libraries). The script is README's "Use with PyTorch" example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from tests.conftest import REPO_ROOT, make_texts, pip_site, write_jsonl

pytestmark = pytest.mark.heavy

TORCH_VERSION = "2.13.0"

TRAIN = """
import json, sys
sys.path.append(sys.argv[1])
import torch
from easydata.reader import TokenReader

class Rows(torch.utils.data.IterableDataset):
    def __init__(self, path):
        self.path = path

    def __iter__(self):
        reader = TokenReader(self.path, batch_size=8, layout="hf", dtype="int64", num_epochs=1,
                             process_index=0, process_count=1, drop_remainder=False)  # as docs/reader.md
        for batch in reader:
            yield {key: torch.from_numpy(array) for key, array in batch.items()}

vocab = int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
seen = {"batches": 0, "rows": 0, "trained": 0, "losses": []}
for batch in torch.utils.data.DataLoader(Rows(sys.argv[2]), batch_size=None):
    logits = model(batch["input_ids"])
    # Hugging Face convention: labels are the inputs; the model shifts them (predict token t+1 at t).
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), batch["labels"][:, 1:].reshape(-1),
                                             ignore_index=-100)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    seen["batches"] += 1
    seen["rows"] += batch["input_ids"].shape[0]
    seen["trained"] += int((batch["labels"][:, 1:] != -100).sum())
    seen["losses"].append(float(loss))
    seen["dtypes"] = sorted({str(v.dtype) for v in batch.values()})
try:  # why the option exists: int32 targets are refused
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab),
                                      batch["labels"][:, 1:].reshape(-1).to(torch.int32), ignore_index=-100)
    seen["int32_refused"] = False
except RuntimeError:
    seen["int32_refused"] = True
print(json.dumps(seen))
"""


@pytest.fixture(scope="session")
def torch_site() -> Path:
    """A directory holding the CPU build of torch (pip --target), installed once and reused."""
    return pip_site(f"torch=={TORCH_VERSION}")


def test_torch_dataloader_trains_on_int64_hf_batches(tmp_path, tokenizer_dir, torch_site):
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(300, seed=8, max_words=40)))
    out = tmp_path / "out"
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl")}],
        "pack": {"enabled": True, "seq_length": 64},
        "save": {"output_dir": str(out), "num_shards": 2, "format": "parquet"},
    })
    run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    rows, vocab = manifest["totals"]["rows"], manifest["tokenizer"]["vocab_size"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", TRAIN, str(torch_site), str(out), str(vocab)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["batches"] == -(-rows // 8) and seen["rows"] == rows  # the whole epoch, the last batch smaller
    assert seen["dtypes"] == ["torch.int64"]
    assert seen["int32_refused"] is True
    assert seen["trained"] > 0 and all(loss == loss and loss > 0 for loss in seen["losses"])  # finite, not NaN
    assert seen["losses"][-1] < seen["losses"][0]  # it learns: SGD on a tiny model over real token rows
