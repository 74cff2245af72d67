"""The chat stage's unit of work: a document batch with chat records in, rendered text and trained
spans out, plus the records the template refused (never rendered some other way).

Used by the batch pipeline's `ChatTemplate` transform and the streaming pipeline alike.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from easydata.text.chat import ChatError, ChatRenderer
from easydata.io.documents import record_excerpt
from easydata.io.sources import DocumentBatch, Reject

__all__ = ["render_batch"]


def render_batch(batch: DocumentBatch, renderer: Optional[ChatRenderer], *,
                 assistant_only_loss: bool) -> tuple[DocumentBatch, list[Reject]]:
    """Renders a batch's chat records; plain documents pass through.

    Returns:
      The batch of kept documents (rendered `texts`; `spans` when `assistant_only_loss`), and one
      `Reject` per chat record the template refused. A batch without chat records is returned as is.
    """
    if batch.conversations is None:
        return batch, []
    keep, texts, spans, rejects = [], [], [], []
    for i, conversation in enumerate(batch.conversations):
        if conversation is None:
            keep.append(i)
            texts.append(batch.texts[i])
            spans.append(None)
            continue
        try:
            if renderer is None:
                raise ChatError("no chat template: set chat.template (the tokenizer has none)")
            text, trained = renderer.render(conversation)
        except ChatError as e:
            name, _, position = batch.keys[i].rpartition("@")
            rejects.append(Reject(batch.dataset, (batch.sources or {}).get(name, name), int(position), str(e),
                                  record_excerpt(conversation.messages)))
            continue
        keep.append(i)
        texts.append(text)
        spans.append(trained if assistant_only_loss else None)
    rendered = dataclasses.replace(
        batch, keys=[batch.keys[i] for i in keep], texts=texts,
        fields={name: [values[i] for i in keep] for name, values in batch.fields.items()},
        conversations=None, spans=spans if any(s is not None for s in spans) else None)
    return rendered, rejects
