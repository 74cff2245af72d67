"""`Tokenize`: document batches -> Arrow record batches of token rows.

The tokenizer is loaded once per worker in `DoFn.setup`; each element is a whole `DocumentBatch`,
encoded in one batched Rust call (`easydata.text.tokenization.encode_documents`).

Encoding runs one batch ahead on a helper thread, and only encoding: while the Rust tokenizer
(which releases the GIL and uses its own threads) encodes batch N+1, this worker's Python thread
turns batch N's encodings into Arrow rows (`rows_from_encoded`) and passes them downstream
(routing, counting, staging), so the tokenizer's threads never wait for Python. Outputs keep their
input order within a bundle, and the last pending batch is emitted in `finish_bundle` with the
window and timestamp it arrived with.

With `checkpoint_staging`, each tokenized batch is also written under the run's staging directory,
named by its work unit and index, for `--resume` (`easydata.run.checkpoint`).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Iterator, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from easydata.run.checkpoint import batch_path, write_batch
from easydata.config import TokenizeStageConfig, TokenizerConfig
from easydata.run.machine import return_free_memory
from easydata.run.progress import ProgressSink
from easydata.io.sources import DocumentBatch
from easydata.text.tokenization import EncodedDocuments, TokenizedStats, encode_documents, rows_from_encoded
from easydata.text.engines import VerifiedEngine
from easydata.text.tokenizer import TokenizerHandle, shared_tokenizer
from easydata.run.counters import RunCounters
from transforms.counters import STATS_TAG
from transforms.failures import classified_failures

__all__ = ["Tokenize"]




@classified_failures
class _TokenizeFn(beam.DoFn):
    def __init__(self, tokenizer: TokenizerConfig, config: TokenizeStageConfig, seed: int,
                 progress_dir: Optional[str], checkpoint_staging: Optional[str], engine: str = "hf",
                 dataset: str = ""):
        self._engine_name, self._dataset = engine, dataset
        self._engine: Optional[VerifiedEngine] = None
        self._tokenizer_config = tokenizer
        self._checkpoint_staging = checkpoint_staging
        self._config = config
        self._seed = seed
        self._progress_dir = progress_dir
        self._tokenizer: Optional[TokenizerHandle] = None
        self._progress: Optional[ProgressSink] = None
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pending: Optional[tuple[DocumentBatch, concurrent.futures.Future, Any, Any]] = None
        self._documents = beam.metrics.Metrics.counter("easydata", "documents_tokenized")
        self._tokens = beam.metrics.Metrics.counter("easydata", "tokens")

    def setup(self) -> None:
        self._tokenizer = shared_tokenizer(self._tokenizer_config)
        # loaded here, in the worker (after any fork: engines may start threads)
        self._engine = self._tokenizer.verified_engine(self._engine_name)
        self._progress = ProgressSink(self._progress_dir)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="easydata-tokenize")

    def start_bundle(self) -> None:
        self._pending = None

    def _encode(self, batch: DocumentBatch) -> Optional[EncodedDocuments]:
        return encode_documents(batch, self._tokenizer, self._config, self._engine) if len(batch) else None

    def _rows(self, batch: DocumentBatch, encoded: Optional[EncodedDocuments]
              ) -> tuple[Optional[pa.RecordBatch], TokenizedStats]:
        if encoded is not None:
            rows, stats = rows_from_encoded(batch, encoded, self._tokenizer, self._config, self._seed)
        else:  # every record of the batch was rejected upstream
            rows, stats = None, TokenizedStats(documents=0, tokens=0)
        if self._checkpoint_staging is not None and batch.unit >= 0:
            write_batch(batch_path(self._checkpoint_staging, batch.dataset, batch.unit, batch.index),
                        rows if rows is not None else pa.record_batch([], schema=pa.schema([])),
                        {"chat_rejected": batch.chat_rejected, "chat_rejected_file": batch.chat_rejected_file,
                         "input_bytes": batch.input_bytes})
        return rows, stats

    def _collect(self) -> tuple[Optional[pa.RecordBatch], Any, Any]:
        batch, future, window, timestamp = self._pending
        self._pending = None
        rows, stats = self._rows(batch, future.result())
        self._documents.inc(stats.documents)
        self._tokens.inc(stats.tokens)
        self._progress.add(documents=stats.documents, tokens=stats.tokens)
        return rows, window, timestamp

    def process(self, batch: DocumentBatch, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam) -> Iterator[Any]:
        submitted = (batch, self._executor.submit(self._encode, batch), window, timestamp)
        if self._pending is not None:
            rows, previous_window, previous_timestamp = self._collect()
            if rows is not None:
                yield WindowedValue(rows, previous_timestamp, [previous_window])
        self._pending = submitted

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._pending is not None:
            rows, window, timestamp = self._collect()
            if rows is not None:
                yield WindowedValue(rows, timestamp, [window])
        self._progress.flush()  # the launcher's counts are current at every bundle's end, not only at teardown
        return_free_memory()
        if self._engine is not None:  # what this bundle's engine did, for the manifest
            counts = {key: value for key, value in self._engine.take_counts().items() if value}
            if counts:
                yield beam.pvalue.TaggedOutput(STATS_TAG, WindowedValue(
                    RunCounters(engines={self._dataset: counts}), MAX_TIMESTAMP, (GlobalWindow(),)))

    def teardown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._progress is not None:
            self._progress.flush()


class Tokenize(beam.PTransform):
    """Tokenizes `DocumentBatch`es into unpacked token rows with shuffle keys.

    Args:
      tokenizer: which tokenizer (loaded once per worker).
      config: tokenize stage settings (special tokens, truncation).
      seed: the pipeline seed (for the rows' shuffle hashes).
      progress_dir: where workers report progress (None: no reporting).
      checkpoint_staging: the run's staging directory: each tokenized batch is also written there
        (`easydata.run.checkpoint`) so `--resume` need not tokenize it again; None: no checkpoints.
    """

    def __init__(self, *, tokenizer: TokenizerConfig, config: TokenizeStageConfig, seed: int,
                 progress_dir: Optional[str] = None, checkpoint_staging: Optional[str] = None, engine: str = "hf",
                 dataset: str = ""):
        super().__init__()
        self._engine, self._dataset = engine, dataset
        self._checkpoint_staging = checkpoint_staging
        self._tokenizer = tokenizer
        self._config = config
        self._seed = seed
        self._progress_dir = progress_dir

    def expand(self, documents: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        """Outputs `rows` (the record batches) and `stats` (a fast engine's counters, `RunCounters.engines`)."""
        return documents | "Encode" >> beam.ParDo(
            _TokenizeFn(self._tokenizer, self._config, self._seed, self._progress_dir, self._checkpoint_staging,
                        self._engine, self._dataset)
        ).with_output_types(pa.RecordBatch).with_outputs(STATS_TAG, main="rows")

    def display_data(self) -> dict[str, Any]:
        return {"tokenizer": self._tokenizer.name_or_path}
