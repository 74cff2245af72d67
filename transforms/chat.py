"""`ChatTemplate`: chat records in document batches -> rendered text with trained spans.

A thin Beam wrapper over `easydata.text.chat`: each worker builds one `ChatRenderer` in `setup` (template
from the config or the tokenizer, special tokens from the tokenizer). Batches without chat records pass
through untouched. A record whose template fails is written to
`<staging>/rejected/<dataset>/chat-<batch id>.jsonl` (a deterministic name: a retried bundle rewrites
it) and counted; it never falls back to another format.

Outputs (tagged):
  main: `DocumentBatch` with rendered `texts` and `spans`
  `stats`: a `RunCounters` (`documents_rejected`) for batches that lost records
  `rejected_files`: relative paths of dead-letter files written
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterator, Optional

import apache_beam as beam

from easydata.text.chat import ChatRenderer
from easydata.text.chat_stage import render_batch
from easydata.config import TokenizerConfig
from easydata.io.dead_letters import dead_letter_path, write_dead_letters
from easydata.io.sources import DocumentBatch
from easydata.text.tokenizer import shared_tokenizer
from easydata.run.counters import RunCounters
from transforms.counters import STATS_TAG
from transforms.read import REJECTED_TAG
from transforms.failures import classified_failures

__all__ = ["ChatTemplate"]


@classified_failures
class _RenderFn(beam.DoFn):
    def __init__(self, dataset: str, tokenizer: TokenizerConfig, template: Optional[str], assistant_only_loss: bool,
                 staging: str):
        self._dataset, self._tokenizer, self._template = dataset, tokenizer, template
        self._assistant_only_loss, self._staging = assistant_only_loss, staging
        self._renderer: Optional[ChatRenderer] = None

    def setup(self) -> None:
        if self._template is not None:
            self._renderer = ChatRenderer.for_tokenizer(shared_tokenizer(self._tokenizer), self._template)

    def process(self, batch: DocumentBatch) -> Iterator[Any]:
        if batch.conversations is None:
            yield batch
            return
        rendered, rejects = render_batch(batch, self._renderer, assistant_only_loss=self._assistant_only_loss)
        rel = None
        if rejects:
            batch_id = hashlib.sha1(batch.keys[0].encode()).hexdigest()[:16]
            rel = write_dead_letters(self._staging, dead_letter_path(self._dataset, f"chat-{batch_id}"), rejects)
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, rel)
            yield beam.pvalue.TaggedOutput(STATS_TAG, RunCounters.of(self._dataset, documents_rejected=len(rejects)))
        # An emptied batch still goes on: its checkpoint records the rejects (`easydata.run.checkpoint`).
        yield dataclasses.replace(rendered, chat_rejected=len(rejects), chat_rejected_file=rel)


class ChatTemplate(beam.PTransform):
    """Renders the chat records of one dataset's document batches (see module docstring).

    Args:
      dataset: dataset name.
      tokenizer: the dataset's tokenizer (special tokens for the template).
      template: the jinja chat template (None: chat records are rejected, saying why).
      assistant_only_loss: keep the assistant spans so tokenization emits a `loss_mask`.
      staging: the run's staging directory (dead letters go below it).
    """

    def __init__(self, *, dataset: str, tokenizer: TokenizerConfig, template: Optional[str],
                 assistant_only_loss: bool, staging: str):
        super().__init__()
        self._fn = _RenderFn(dataset, tokenizer, template, assistant_only_loss, staging)

    def expand(self, documents: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return documents | "Render" >> beam.ParDo(self._fn).with_output_types(DocumentBatch).with_outputs(
            STATS_TAG, REJECTED_TAG, main="documents")
