"""`Tokenize`: document batches -> Arrow record batches of token rows, through the chat and tokenize stages.

A thin Beam wrapper over `easydata.text.stages.DocumentStages`, the one composition of the stages
between reading and the shuffle: each batch's chat records are rendered with the template (`render`;
a refused record is written to `<staging>/rejected/<dataset>/chat-<batch id>.jsonl`, a deterministic
name a retried bundle rewrites, and counted), then encoded (`encode`, one batched Rust call per kind
of document) and turned into rows (`rows`). The tokenizer is loaded once per worker in `DoFn.setup`.

Encoding runs one batch ahead on a helper thread, and only encoding: while the Rust tokenizer
(which releases the GIL and uses its own threads) encodes batch N+1, this worker's Python thread
renders the next batch's chat records and turns batch N's encodings into Arrow rows, and passes them
downstream (routing, counting, staging), so the tokenizer's threads never wait for Python. Outputs
keep their input order within a bundle, and the last pending batch is emitted in `finish_bundle` with
the window and timestamp it arrived with.

With `checkpoint`, each tokenized batch is also written under the run's staging directory,
named by its work unit and index, for `--resume` (`easydata.run.checkpoint`).

Outputs (tagged):
  `rows`: `pa.RecordBatch` of token rows (with the hidden shuffle columns)
  `stats`: `RunCounters`: chat records rejected, tokens truncation cut off, a fast engine's counts
  `rejected_files`: relative paths of the chat dead-letter files written
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
from typing import Any, Iterator, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from easydata.config import TokenizeStageConfig, TokenizerConfig
from easydata.io.dead_letters import dead_letter_path, write_dead_letters
from easydata.io.documents import DocumentBatch
from easydata.run.checkpoint import batch_path, write_batch
from easydata.run.counters import RunCounters
from easydata.memory import return_free_memory
from easydata.run.progress import ProgressSink
from easydata.text.stages import DocumentStages
from easydata.text.tokenization import EncodedDocuments, TokenizedStats
from easydata.text.tokenizer import shared_tokenizer
from transforms.counters import STATS_TAG
from transforms.failures import classified_failures
from transforms.read import REJECTED_TAG

__all__ = ["Tokenize"]


@classified_failures
class _TokenizeFn(beam.DoFn):
    def __init__(self, tokenizer: TokenizerConfig, config: TokenizeStageConfig, seed: int, *,
                 template: Optional[str], assistant_only_loss: bool, staging: Optional[str],
                 progress_dir: Optional[str], checkpoint: bool, engine: str, dataset: str,
                 template_kwargs: Optional[dict[str, Any]] = None):
        self._tokenizer_config, self._config, self._seed = tokenizer, config, seed
        self._template_kwargs = template_kwargs
        self._template, self._assistant_only_loss, self._staging = template, assistant_only_loss, staging
        self._progress_dir, self._checkpoint = progress_dir, checkpoint
        self._engine_name, self._dataset = engine, dataset
        self._stages: Optional[DocumentStages] = None
        self._progress: Optional[ProgressSink] = None
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pending: Optional[tuple[DocumentBatch, concurrent.futures.Future, Any, Any]] = None
        self._documents = beam.metrics.Metrics.counter("easydata", "documents_tokenized")
        self._tokens = beam.metrics.Metrics.counter("easydata", "tokens")

    def setup(self) -> None:
        handle = shared_tokenizer(self._tokenizer_config)
        # the engine is loaded here, in the worker (after any fork: engines may start threads)
        self._stages = DocumentStages(handle, self._config, seed=self._seed, template=self._template,
                                      assistant_only_loss=self._assistant_only_loss,
                                      engine=handle.verified_engine(self._engine_name),
                                      template_kwargs=self._template_kwargs)
        self._progress = ProgressSink(self._progress_dir)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="easydata-tokenize")

    def start_bundle(self) -> None:
        self._pending = None
        self._truncated = 0  # tokens `truncation: truncate` cut off in this bundle

    def _render(self, batch: DocumentBatch) -> Iterator[Any]:
        """The chat stage: yields the dead-letter file and counters of refused records, returns the batch."""
        rendered, rejects = self._stages.render(batch)
        if rejects:
            batch_id = hashlib.sha1(batch.keys[0].encode()).hexdigest()[:16]
            rel = write_dead_letters(self._staging, dead_letter_path(self._dataset, f"chat-{batch_id}"), rejects)
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, rel)
            yield beam.pvalue.TaggedOutput(STATS_TAG, RunCounters.of(self._dataset, documents_rejected=len(rejects)))
            # An emptied batch still goes on: its checkpoint records the rejects (`easydata.run.checkpoint`).
            rendered = dataclasses.replace(rendered, chat_rejected=len(rejects), chat_rejected_file=rel)
        return rendered

    def _rows(self, batch: DocumentBatch, encoded: Optional[EncodedDocuments]
              ) -> tuple[Optional[pa.RecordBatch], TokenizedStats]:
        rows, stats = self._stages.rows(batch, encoded)
        if self._checkpoint and batch.unit >= 0:
            write_batch(batch_path(self._staging, batch.dataset, batch.unit, batch.index),
                        rows if rows is not None else pa.record_batch([], schema=pa.schema([])),
                        {"chat_rejected": batch.chat_rejected, "chat_rejected_file": batch.chat_rejected_file,
                         "input_bytes": batch.input_bytes, "truncated_tokens": stats.truncated_tokens})
        return rows, stats

    def _collect(self) -> tuple[Optional[pa.RecordBatch], Any, Any]:
        batch, future, window, timestamp = self._pending
        self._pending = None
        rows, stats = self._rows(batch, future.result())
        self._documents.inc(stats.documents)
        self._tokens.inc(stats.tokens)
        self._truncated += stats.truncated_tokens
        self._progress.add(tokens=stats.tokens)  # documents are counted as read (`ReadDocuments`)
        return rows, window, timestamp

    def process(self, batch: DocumentBatch, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam) -> Iterator[Any]:
        if batch.rows is not None:  # a resumed run's checkpointed rows (`ReadDocuments`): tokenized already
            rows = batch.rows
            self._progress.add(tokens=len(rows.column("input_ids").values) if "input_ids" in rows.schema.names else 0)
            yield WindowedValue(rows, timestamp, [window])
            return
        rendered = yield from self._render(batch)
        submitted = (rendered, self._executor.submit(self._stages.encode, rendered), window, timestamp)
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
        counters = RunCounters.of(self._dataset, truncated_tokens=self._truncated)
        engine = self._stages.engine
        if engine is not None:  # what this bundle's engine did, for the manifest
            counts = {key: value for key, value in engine.take_counts().items() if value}
            if counts:
                counters.engines[self._dataset] = counts
        if counters.counts or counters.engines:
            yield beam.pvalue.TaggedOutput(STATS_TAG, WindowedValue(counters, MAX_TIMESTAMP, (GlobalWindow(),)))

    def teardown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._progress is not None:
            self._progress.flush()


class Tokenize(beam.PTransform):
    """Renders chat records and tokenizes `DocumentBatch`es into unpacked token rows with shuffle keys.

    Args:
      dataset: the dataset's name (its dead letters and counters).
      tokenizer: which tokenizer (loaded once per worker).
      config: tokenize stage settings (special tokens, truncation).
      seed: the pipeline seed (for the rows' shuffle hashes).
      template: the jinja chat template (None: chat records are rejected, saying why).
      template_kwargs: more template variables (`chat.template_kwargs`).
      assistant_only_loss: keep the assistant spans so rows get a `loss_mask`.
      staging: the run's staging directory (chat dead letters go below it).
      progress_dir: where workers report progress (None: no reporting).
      checkpoint: also write each tokenized batch under `staging` (`easydata.run.checkpoint`), so
        `--resume` need not tokenize it again.
      engine: what encodes plain documents (the plan's choice, `easydata.text.engines`).
    """

    def __init__(self, *, dataset: str, tokenizer: TokenizerConfig, config: TokenizeStageConfig, seed: int,
                 template: Optional[str] = None, assistant_only_loss: bool = False, staging: Optional[str] = None,
                 progress_dir: Optional[str] = None, checkpoint: bool = False, engine: str = "hf",
                 template_kwargs: Optional[dict[str, Any]] = None):
        super().__init__()
        self._tokenizer = tokenizer
        self._fn = _TokenizeFn(tokenizer, config, seed, template=template, assistant_only_loss=assistant_only_loss,
                               staging=staging, progress_dir=progress_dir, checkpoint=checkpoint, engine=engine,
                               dataset=dataset, template_kwargs=template_kwargs)

    def expand(self, documents: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        """Outputs `rows` (the record batches), `stats` and `rejected_files` (see module docstring)."""
        return documents | "Encode" >> beam.ParDo(self._fn).with_output_types(pa.RecordBatch).with_outputs(
            STATS_TAG, REJECTED_TAG, main="rows")

    def display_data(self) -> dict[str, Any]:
        return {"tokenizer": self._tokenizer.name_or_path}
