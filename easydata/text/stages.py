"""`DocumentStages`: what happens to a batch of documents between reading and the shuffle, composed once.

  DocumentBatch --render (chat records -> text and trained spans; the template's refusals -> Reject)-->
                --encode (the Rust part: one batched call per kind of document)-->
                --rows (the Python part: special tokens, truncation or windows, loss mask, shuffle keys)-->
  token rows (an Arrow record batch), their counters (`TokenizedStats`) and the rejects

Every path that turns documents into rows runs this one composition: the batch pipeline's
`transforms.tokenize.Tokenize` step (which runs `encode` one batch ahead on a helper thread, so it calls
the three parts itself, in this order), a stream's window step (`transforms.stream`), the dry run's
estimate (`easydata.run.dry_run`) and the Python API's `TokenizedShardedSource` (`easydata.compat`).
`process` is the three parts in a row. `tests/test_one_composition.py` runs the same documents through
all four and compares rows and counters.

Example:
    stages = DocumentStages.for_dataset(config, dataset, load_tokenizer(tok), template)
    done = stages.process(batch)
    done.rows, done.stats.documents, done.rejects
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pyarrow as pa

from easydata.config import DatasetConfig, PipelineConfig, TokenizeStageConfig
from easydata.io.documents import DocumentBatch, Reject
from easydata.text.chat import ChatRenderer
from easydata.text.chat_stage import render_batch
from easydata.text.tokenization import EncodedDocuments, TokenizedStats, encode_documents, rows_from_encoded
from easydata.text.tokenizer import TokenizerHandle

__all__ = ["DocumentStages", "StagedBatch"]


@dataclasses.dataclass
class StagedBatch:
    """What `DocumentStages.process` made of one batch.

    Attributes:
      rows: the token rows (None when no document of the batch was left to tokenize).
      stats: documents tokenized and tokens written.
      rejects: the chat records the template refused (dead letters).
    """

    rows: Optional[pa.RecordBatch]
    stats: TokenizedStats
    rejects: list[Reject]


class DocumentStages:
    """One dataset's chat and tokenize stages (see module docstring).

    Args:
      tokenizer: the loaded tokenizer.
      tokenize: the dataset's tokenize settings (`PipelineConfig.tokenize_for`).
      seed: the pipeline seed (the rows' shuffle hashes).
      template: the chat template (None: chat records are rejected, saying why).
      assistant_only_loss: keep the assistant spans, so rows get a `loss_mask`.
      engine: a verified fast engine for plain documents (`easydata.text.engines.VerifiedEngine`); the
        owner may set `engine` later (a stream chooses at its first window).
      template_kwargs: more template variables (`chat.template_kwargs`).
    """

    def __init__(self, tokenizer: TokenizerHandle, tokenize: TokenizeStageConfig, *, seed: int,
                 template: Optional[str] = None, assistant_only_loss: bool = False, engine: Any = None,
                 template_kwargs: Optional[dict[str, Any]] = None):
        self.tokenizer, self.tokenize, self.seed = tokenizer, tokenize, seed
        self.assistant_only_loss, self.engine = assistant_only_loss, engine
        self._template, self._template_kwargs = template, dict(template_kwargs or {})
        self._renderer: Optional[ChatRenderer] = None

    @classmethod
    def for_dataset(cls, config: PipelineConfig, dataset: DatasetConfig, tokenizer: TokenizerHandle,
                    template: Optional[str], *, engine: Any = None) -> "DocumentStages":
        """The stages of `dataset` in the job `config`."""
        return cls(tokenizer, config.tokenize_for(dataset), seed=config.seed, template=template,
                   assistant_only_loss=config.chat.assistant_only_loss, engine=engine,
                   template_kwargs=config.chat.template_kwargs)

    @property
    def renderer(self) -> Optional[ChatRenderer]:
        """The template's renderer, built at the first chat record (plain text never needs it)."""
        if self._renderer is None and self._template is not None:
            self._renderer = ChatRenderer.for_tokenizer(self.tokenizer, self._template, self._template_kwargs)
        return self._renderer

    def render(self, batch: DocumentBatch) -> tuple[DocumentBatch, list[Reject]]:
        """The chat stage: a batch's chat records rendered (`easydata.text.chat_stage.render_batch`)."""
        if batch.conversations is None:
            return batch, []
        return render_batch(batch, self.renderer, assistant_only_loss=self.assistant_only_loss)

    def encode(self, batch: DocumentBatch) -> Optional[EncodedDocuments]:
        """The Rust part of tokenizing (releases the GIL); None for an empty batch."""
        return encode_documents(batch, self.tokenizer, self.tokenize, self.engine) if len(batch) else None

    def rows(self, batch: DocumentBatch, encoded: Optional[EncodedDocuments]
             ) -> tuple[Optional[pa.RecordBatch], TokenizedStats]:
        """The Python part of tokenizing: the rows of an encoded batch and their counters."""
        if encoded is None:  # every record of the batch was rejected upstream
            return None, TokenizedStats(documents=0, tokens=0)
        return rows_from_encoded(batch, encoded, self.tokenizer, self.tokenize, self.seed)

    def process(self, batch: DocumentBatch) -> StagedBatch:
        """`render`, `encode` and `rows` in a row."""
        rendered, rejects = self.render(batch)
        rows, stats = self.rows(rendered, self.encode(rendered))
        return StagedBatch(rows=rows, stats=stats, rejects=rejects)
