"""`Tokenize`: document batches -> Arrow record batches of token rows.

The tokenizer is loaded once per worker in `DoFn.setup`; each element is a whole `DocumentBatch`,
tokenized in one batched Rust call by `easydata.tokenization.tokenize_documents`.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import apache_beam as beam
import pyarrow as pa

from easydata.config import TokenizeStageConfig, TokenizerConfig
from easydata.progress import ProgressSink
from easydata.sources import DocumentBatch
from easydata.tokenization import tokenize_documents
from easydata.tokenizer import TokenizerHandle

__all__ = ["Tokenize"]


class _TokenizeFn(beam.DoFn):
    def __init__(self, tokenizer: TokenizerConfig, config: TokenizeStageConfig, seed: int,
                 progress_dir: Optional[str]):
        self._tokenizer_config = tokenizer
        self._config = config
        self._seed = seed
        self._progress_dir = progress_dir
        self._tokenizer: Optional[TokenizerHandle] = None
        self._progress: Optional[ProgressSink] = None
        self._documents = beam.metrics.Metrics.counter("easydata", "documents_tokenized")
        self._tokens = beam.metrics.Metrics.counter("easydata", "tokens")

    def setup(self) -> None:
        self._tokenizer = TokenizerHandle(self._tokenizer_config)
        self._progress = ProgressSink(self._progress_dir)

    def process(self, batch: DocumentBatch) -> Iterator[pa.RecordBatch]:
        rows, stats = tokenize_documents(batch, self._tokenizer, self._config, self._seed)
        self._documents.inc(stats.documents)
        self._tokens.inc(stats.tokens)
        self._progress.add(documents=stats.documents, tokens=stats.tokens)
        yield rows

    def teardown(self) -> None:
        if self._progress is not None:
            self._progress.flush()


class Tokenize(beam.PTransform):
    """Tokenizes `DocumentBatch`es into unpacked token rows with shuffle keys.

    Args:
      tokenizer: which tokenizer (loaded once per worker).
      config: tokenize stage settings (special tokens, truncation).
      seed: the pipeline seed (for the rows' shuffle hashes).
      progress_dir: where workers report progress (None: no reporting).
    """

    def __init__(self, *, tokenizer: TokenizerConfig, config: TokenizeStageConfig, seed: int,
                 progress_dir: Optional[str] = None):
        super().__init__()
        self._tokenizer = tokenizer
        self._config = config
        self._seed = seed
        self._progress_dir = progress_dir

    def expand(self, documents: beam.PCollection) -> beam.PCollection:
        return documents | "Encode" >> beam.ParDo(
            _TokenizeFn(self._tokenizer, self._config, self._seed, self._progress_dir))

    def display_data(self) -> dict[str, Any]:
        return {"tokenizer": self._tokenizer.name_or_path}
