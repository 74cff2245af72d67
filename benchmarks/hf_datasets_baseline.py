"""The common alternative to `easydata run`, timed by `bench_pipeline.py` as a baseline.

    python benchmarks/hf_datasets_baseline.py CORPUS.jsonl TOKENIZER_DIR OUTPUT_DIR [--seq-length 2048]
        [--num-proc N]

What ML engineers write today with Hugging Face `datasets` (the `run_clm.py` recipe):
`load_dataset("json")`, `map(tokenize, batched=True, num_proc=N)` with the same Rust tokenizer
(`tokenizers.Tokenizer.encode_batch`, EOS appended), concatenate-and-split packing (`group_texts`:
every `seq_length` tokens of each map batch's concatenated stream become a row, and each batch's
remainder is dropped, as in `run_clm.py`),
a shuffle, and `to_parquet` (its default codec, snappy: it rejects a `compression` argument). Caching is disabled and the cache directory is fresh, so
nothing is reused between runs. Prints one JSON line: rows and tokens written.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus")
    parser.add_argument("tokenizer_dir")
    parser.add_argument("output_dir")
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--num-proc", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    import datasets
    from tokenizers import Tokenizer

    datasets.disable_caching()
    datasets.utils.logging.disable_progress_bar()
    tokenizer_file = os.path.join(args.tokenizer_dir, "tokenizer.json")
    eos_id = Tokenizer.from_file(tokenizer_file).token_to_id("</s>")
    length = args.seq_length
    state: dict[str, Any] = {}

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        if "tokenizer" not in state:  # once per worker process
            state["tokenizer"] = Tokenizer.from_file(tokenizer_file)
        encodings = state["tokenizer"].encode_batch(batch["text"])
        return {"input_ids": [e.ids + ([eos_id] if eos_id is not None else []) for e in encodings]}

    def group_texts(batch: dict[str, list]) -> dict[str, list]:
        flat = np.concatenate([np.asarray(ids, dtype=np.int32) for ids in batch["input_ids"]])
        usable = len(flat) // length * length
        return {"input_ids": flat[:usable].reshape(-1, length).tolist()}

    with tempfile.TemporaryDirectory(prefix="hf-cache-") as cache:
        data = datasets.load_dataset("json", data_files=args.corpus, split="train", cache_dir=cache)
        tokenized = data.map(tokenize, batched=True, batch_size=1000, num_proc=args.num_proc,
                             remove_columns=data.column_names)
        packed = tokenized.map(group_texts, batched=True, batch_size=1000, num_proc=args.num_proc)
        packed = packed.shuffle(seed=0).flatten_indices()
        os.makedirs(args.output_dir, exist_ok=True)
        packed.to_parquet(os.path.join(args.output_dir, "data.parquet"))  # its default codec (snappy)
    rows = len(packed)
    print(json.dumps({"rows": rows, "tokens": rows * length}))


if __name__ == "__main__":
    main()
