"""`Tokenize` wiring under `TestPipeline`: whole batches in, Arrow rows with shuffle keys out."""

from __future__ import annotations

import pytest
import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from tokenizers import Tokenizer

from easydata.config import TokenizeStageConfig, TokenizerConfig
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN
from easydata.io.sources import DocumentBatch
from tests.conftest import make_texts
from transforms import Tokenize

pytestmark = pytest.mark.slow


def test_rows_match_tokenizer_and_carry_keys(tokenizer_dir):
    texts = make_texts(40, seed=5)
    batches = [DocumentBatch("d", [f"f@{i}" for i in range(s, s + 10)], texts[s:s + 10],
                             {"n": list(range(s, s + 10))}) for s in range(0, 40, 10)]
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    expected = [(f"f@{i}", i, tok.encode(t).ids + [eos]) for i, t in enumerate(texts)]
    with TestPipeline() as p:
        rows = (p
                | beam.Create(batches)
                | Tokenize(dataset="f", tokenizer=TokenizerConfig(name_or_path=str(tokenizer_dir)),
                           config=TokenizeStageConfig(), seed=1)).rows
        rows = (rows
                | beam.FlatMap(lambda b: zip(b.column(KEY_COLUMN).to_pylist(), b.column("n").to_pylist(),
                                             b.column("input_ids").to_pylist(),
                                             b.column(HASH_COLUMN).to_pylist()))
                | beam.Map(lambda r: (r[0], r[1], r[2])))
        assert_that(rows, equal_to(expected))
