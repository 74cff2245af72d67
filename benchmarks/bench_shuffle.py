"""Bytes per token through the shuffle as the number of hash groups grows: what Dataflow Shuffle carries.

A local run of the 48 MB benchmark has two hash groups, so each routed element holds half a batch of
rows and the manifest's `shuffle.bytes_per_token` is close to the ids' own size. A terabyte-scale run
has tens of thousands of groups (one per ~48 MB of rows, `easydata.ops.sharding.choose_num_groups`):
a batch of a thousand documents is split into as many elements as it has groups, each with its own
header, column directory, keys and hashes, and each compressed alone. This measures that, without
running a job: it reads a JSONL corpus with the pipeline's own reader (`easydata.io.sources`),
tokenizes every batch with the pipeline's own code (`easydata.text.tokenization`), then for each group
count splits and encodes the batches as the routing step does (`group_ranges`, then
`encode_row_ranges`, with and without compression, and with the zstd dictionary a run of that many groups
trains at planning, `easydata.ops.shuffle_dictionary`, here from the corpus's first 2,000 documents as
they route, and measured on the other documents) and sizes each `(group, bytes)` element with the coder the job uses
(`transforms.shuffle.KEYED_ROWS_CODER`). Documents can also be cut into pieces of
at most `--doc-chars` characters first, to stand in for a corpus of short documents (web text).

    python benchmarks/bench_shuffle.py --tokenizer DIR --data benchmarks/_work/corpus-48mb.jsonl

It is a measurement, not a test: nothing fails. Run `bench_pipeline.py` first to build the corpus.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

from easydata.config import DatasetConfig, TokenizeStageConfig
from easydata.io.compact_rows import encode_row_ranges
from easydata.ops.shuffle_dictionary import sample_routed_rows, train_shuffle_dictionary
from easydata.io.sources import plan_splits, read_split
from easydata.ops.sharding import choose_num_groups, group_ranges
from easydata.text.stages import DocumentStages
from easydata.text.tokenizer import load_tokenizer
from transforms.shuffle import KEYED_ROWS_CODER

DEFAULT_GROUPS = (2, 64, 4096, 65536)


def cut_corpus(source: Path, chars: int, dest: Path) -> Path:
    """`source`'s documents cut into pieces of at most `chars` characters (at line ends where one is near)."""
    with source.open(encoding="utf-8") as lines, dest.open("w", encoding="utf-8") as out:
        for line in lines:
            text = json.loads(line)["text"]
            at = 0
            while at < len(text):
                end = min(len(text), at + chars)
                newline = text.rfind("\n", at + chars // 2, end)
                end = newline + 1 if end < len(text) and newline >= 0 else end
                out.write(json.dumps({"text": text[at:end]}) + "\n")
                at = end
    return dest


def tokenized_batches(data: Path, tokenizer_dir: str, batch_size: int, max_mb: Optional[float]) -> Iterator:
    """The corpus's token rows as the tokenize stage emits them (keys and hashes included)."""
    dataset = DatasetConfig(name="corpus", data_files=str(data), type="jsonl")
    tokenizer = load_tokenizer(tokenizer_dir)
    config = TokenizeStageConfig()
    read = 0
    for split in plan_splits(dataset):
        for batch in read_split(split, dataset, batch_size=batch_size):
            if not len(batch):
                continue
            rows = DocumentStages(tokenizer, config, seed=42).process(batch).rows
            yield rows
            read += batch.input_bytes
            if max_mb is not None and read >= max_mb * 1e6:
                return


def routed(batches: list, num_groups: int, compress: bool,
           dictionary: Optional[bytes] = None) -> Iterator[tuple[int, bytes]]:
    """`(group, encoded rows)` elements, as `transforms.shuffle` routes each batch."""
    for batch in batches:
        rows, groups_of_rows, starts, stops = group_ranges(batch, num_groups)
        yield from zip(groups_of_rows, encode_row_ranges(rows, starts, stops, compress=compress,
                                                         dictionary=dictionary))


def measure(batches: list, groups: list[int]) -> list[tuple]:
    """Per group count: (groups, elements, raw bytes/token, compressed bytes/token, CPU microseconds per
    token to split and encode, bytes/token with a dictionary (None when that many groups get none),
    CPU microseconds per token with it)."""
    import easydata.ops.shuffle_dictionary as shuffle_dictionary

    tokens = sum(len(b.column("input_ids").values) for b in batches)
    results = []
    training, documents = [], 0
    for batch in batches:  # about what planning samples: 2,000 documents
        if documents >= 2000:
            break
        training.append(batch)
        documents += batch.num_rows
    for num_groups in groups:
        started = time.process_time()
        sizes = [KEYED_ROWS_CODER.estimate_size(element) for element in routed(batches, num_groups, compress=True)]
        seconds = time.process_time() - started
        elements, compressed = len(sizes), sum(sizes)
        raw = sum(KEYED_ROWS_CODER.estimate_size(element) for element in routed(batches, num_groups, compress=False))
        dictionary = train_shuffle_dictionary(sample_routed_rows(training, num_groups)) \
            if num_groups >= shuffle_dictionary.MIN_GROUPS else None
        with_dictionary = micros = None
        if dictionary is not None:  # measured on the documents it was not trained on
            rest = batches[len(training):]
            rest_tokens = sum(len(b.column("input_ids").values) for b in rest)
            started = time.process_time()
            with_dictionary = sum(KEYED_ROWS_CODER.estimate_size(element)
                                  for element in routed(rest, num_groups, True, dictionary)) / max(rest_tokens, 1)
            micros = (time.process_time() - started) / max(rest_tokens, 1) * 1e6
        results.append((num_groups, elements, raw / tokens, compressed / tokens, seconds / tokens * 1e6,
                        with_dictionary, micros))
    return results


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a JSONL corpus with a `text` field")
    parser.add_argument("--tokenizer", required=True, help="tokenizer dir (tokenizer.json) or hub id")
    parser.add_argument("--groups", default=",".join(map(str, DEFAULT_GROUPS)), help="hash group counts")
    parser.add_argument("--doc-chars", type=int, default=2000,
                        help="also measure the corpus cut into documents of at most this many characters (0: not)")
    parser.add_argument("--batch-size", type=int, default=TokenizeStageConfig().batch_size,
                        help="documents per batch (the tokenize stage's batch_size)")
    parser.add_argument("--max-mb", type=float, default=None, help="read at most this many MB of the corpus")
    args = parser.parse_args(argv)
    groups = [int(g) for g in args.groups.split(",")]
    corpora = [("as is", Path(args.data))]
    with tempfile.TemporaryDirectory() as scratch:
        if args.doc_chars:
            corpora.append((f"cut to {args.doc_chars:,} chars",
                            cut_corpus(Path(args.data), args.doc_chars, Path(scratch) / "cut.jsonl")))
        print(f"groups a 1 TB JSONL run plans: {choose_num_groups(int(1e12 * 2.5)):,} "
              "(easydata.ops.sharding.choose_num_groups, 2.5 bytes of rows per input byte)")
        for label, path in corpora:
            batches = list(tokenized_batches(path, args.tokenizer, args.batch_size, args.max_mb))
            tokens = sum(len(b.column("input_ids").values) for b in batches)
            documents = sum(b.num_rows for b in batches)
            print(f"\n{label}: {documents:,} documents, {tokens:,} tokens ({tokens / max(documents, 1):,.0f} per"
                  f" document), {len(batches):,} batches")
            print(f"{'groups':>8} {'elements':>10} {'B/token raw':>12} {'B/token zstd':>13} {'encode µs/token':>16}"
                  f" {'B/token zstd+dictionary':>24} {'encode µs/token':>16}")
            for num_groups, elements, raw, compressed, micros, dictionary, dict_micros in measure(batches, groups):
                print(f"{num_groups:>8,} {elements:>10,} {raw:>12.2f} {compressed:>13.2f} {micros:>16.3f}"
                      f" {'-' if dictionary is None else f'{dictionary:.2f}':>24}"
                      f" {'-' if dict_micros is None else f'{dict_micros:.3f}':>16}")
    print("\nB/token: bytes of (group, encoded rows) elements as the shuffle's coder encodes them, per token;"
          "\nraw: without compression; zstd+dictionary: with the dictionary a run of that many groups trains"
          "\n(none below easydata.ops.shuffle_dictionary.MIN_GROUPS), trained on the first ~2,000 documents and"
          "\nmeasured on the others; encode µs/token: CPU to split and encode"
          "\n(compressed) every batch once, per token (tokenizing costs about 1 µs per token per core on the"
          "\nbenchmark corpus)."
)
    return 0


if __name__ == "__main__":
    sys.exit(main())
