"""Streaming transforms: Pub/Sub messages -> per-window packed shards -> committed windows.

  messages --WindowInto(fixed event-time windows, trigger, allowed lateness)--> GroupByKey(dataset)
           --ProcessWindow--> one staged shard (+ dead letters) per dataset, window and pane
           --global window, one key--> CommitWindows (serial) --> files in place, manifest rewritten

`ProcessWindow` runs the same core as the batch pipeline on a window's messages: the reader's record
checks (`easydata.io.sources`), the chat and tokenize stages (`easydata.text.stages.DocumentStages`,
the one composition the batch step runs too) and packing (`easydata.ops.pack_stage`) over the window's
documents in key-hash order, so no token is lost or duplicated across windows and a window's rows do not depend
on arrival order. Commits go through one key in the global window, so one worker at a time rewrites
the manifest (`easydata.run.streaming.commit_window`).
"""

from __future__ import annotations

import collections
import time
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import StrUtf8Coder
from apache_beam.transforms import trigger, window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer

from easydata.config import DatasetConfig, PipelineConfig, StreamingConfig, TokenizerConfig
from easydata.io.dead_letters import dead_letter_path, write_dead_letters
from easydata.io.filesystems import file_size, remove_file
from easydata.io.formats import assemble_shard, shard_file_name, write_piece
from easydata.io.staging import Staging
from easydata.rows import HIDDEN_COLUMNS
from easydata.ops.pack_stage import pack_group
from easydata.ops.sharding import sort_group
from easydata.io.sources import collect_records
from easydata.run.finalize import engine_entry
from easydata.run.streaming import commit_window, parse_message, window_id
from easydata.text.stages import DocumentStages
from easydata.text.tokenizer import shared_tokenizer
from transforms.failures import classified_failures

__all__ = ["WindowMessages", "ProcessWindow", "CommitWindows"]



def windowing(settings: StreamingConfig) -> beam.WindowInto:
    """Fixed event-time windows firing at the watermark (and early / late as configured)."""
    early = trigger.AfterProcessingTime(settings.early_firing_seconds) if settings.early_firing_seconds else None
    late = trigger.AfterCount(1) if settings.allowed_lateness_seconds else None
    return beam.WindowInto(window.FixedWindows(settings.window_seconds),
                           trigger=trigger.AfterWatermark(early=early, late=late),
                           allowed_lateness=settings.allowed_lateness_seconds,
                           accumulation_mode=trigger.AccumulationMode.DISCARDING)


@classified_failures
class _FindDroppedLateFn(beam.DoFn):
    """Emits the messages the window's GroupByKey will drop as too late (Python Beam drops them
    without a metric).

    Runs beside the GroupByKey on the same messages (in the global window, keyed by dataset) and
    learns from an event-time timer when the watermark has passed a window's end plus the allowed
    lateness; a message of a window already past that point when it arrives is one the GroupByKey
    drops. State: the open windows' deadlines and the latest deadline the watermark has passed (a few
    numbers per dataset). The counter is incremented downstream (`_count_dropped_late`): Beam's
    local runner loses the metrics of DoFns with timers.
    """

    PENDING = ReadModifyWriteStateSpec("pending_deadlines", beam.coders.PickleCoder())
    PASSED = ReadModifyWriteStateSpec("passed_deadline", beam.coders.FloatCoder())
    DEADLINE = TimerSpec("deadline", TimeDomain.WATERMARK)

    def __init__(self, settings: StreamingConfig):
        self._size, self._lateness = settings.window_seconds, settings.allowed_lateness_seconds

    def process(self, element: tuple[str, Any], timestamp=beam.DoFn.TimestampParam,
                pending=beam.DoFn.StateParam(PENDING), passed=beam.DoFn.StateParam(PASSED),
                deadline=beam.DoFn.TimerParam(DEADLINE)) -> Iterator[Any]:
        end = (float(timestamp) // self._size + 1) * self._size
        limit = end + self._lateness  # the GroupByKey drops the window's messages once the watermark passes it
        if limit <= (passed.read() or float("-inf")):
            yield element
            return
        deadlines = set(pending.read() or ())
        if limit not in deadlines:
            deadlines.add(limit)
            pending.write(deadlines)
            deadline.set(min(deadlines))

    @on_timer(DEADLINE)
    def watermark_passed(self, fire=beam.DoFn.TimestampParam, pending=beam.DoFn.StateParam(PENDING),
                         passed=beam.DoFn.StateParam(PASSED), deadline=beam.DoFn.TimerParam(DEADLINE)) -> None:
        now = float(fire)
        passed.write(max(now, passed.read() or float("-inf")))
        deadlines = {d for d in (pending.read() or ()) if d > now}
        pending.write(deadlines)
        if deadlines:
            deadline.set(min(deadlines))


@classified_failures
class _CountDroppedLateFn(beam.DoFn):
    """`stream_late_messages_dropped`: one per message `_FindDroppedLateFn` emits."""

    def __init__(self):
        self._dropped = beam.metrics.Metrics.counter("easydata", "stream_late_messages_dropped")

    def process(self, late: tuple[str, Any]) -> Iterator[Any]:
        self._dropped.inc()
        return iter(())


class WindowMessages(beam.PTransform):
    """Windows one dataset's messages and groups each window's messages together; counts the messages
    dropped as too late (`stream_late_messages_dropped`) on a branch beside the grouping.

    Args:
      arrival_time: window by the time messages are read instead of their timestamps (publish time).
    """

    def __init__(self, *, name: str, settings: StreamingConfig, arrival_time: bool = False):
        super().__init__()
        self._name, self._settings, self._arrival_time = name, settings, arrival_time

    def expand(self, messages: beam.PCollection) -> beam.PCollection:
        name = self._name
        if self._arrival_time:  # event time = when read (moving timestamps forward is always allowed)
            messages = messages | "ArrivalTime" >> beam.Map(lambda m: window.TimestampedValue(m, time.time()))
        _ = (messages
             | "GlobalForLateCount" >> beam.WindowInto(window.GlobalWindows())
             | "KeyForLateCount" >> beam.Map(lambda m: (name, m))
             | "FindDroppedLate" >> beam.ParDo(_FindDroppedLateFn(self._settings))
             | "CountDroppedLate" >> beam.ParDo(_CountDroppedLateFn()))
        return (messages
                | "Window" >> windowing(self._settings)
                | "KeyByDataset" >> beam.Map(lambda m: (name, m))
                | "GroupWindow" >> beam.GroupByKey())


@classified_failures
class _ProcessWindowFn(beam.DoFn):
    def __init__(self, config: PipelineConfig, dataset: DatasetConfig, tokenizer: TokenizerConfig,
                 template: Optional[str], pad_id: int, staging: str):
        self._config, self._dataset, self._tokenizer_config = config, dataset, tokenizer
        self._template, self._pad_id, self._staging = template, pad_id, staging
        self._documents = beam.metrics.Metrics.counter("easydata", "stream_documents")
        self._tokens = beam.metrics.Metrics.counter("easydata", "stream_tokens")
        self._rows = beam.metrics.Metrics.counter("easydata", "stream_rows")
        self._rejected = beam.metrics.Metrics.counter("easydata", "stream_rejected")
        self._late = beam.metrics.Metrics.counter("easydata", "stream_late_panes")

    def setup(self) -> None:
        self._tokenizer = shared_tokenizer(self._tokenizer_config)
        self._stages = DocumentStages.for_dataset(self._config, self._dataset, self._tokenizer, self._template)
        self._engine: Any = None  # the `VerifiedEngine` (False: hf), chosen at this worker's first plain documents
        self._choice: Optional[dict[str, Any]] = None

    def _engine_for(self, batch: Any) -> Any:
        """The fast engine for plain documents, or None: chosen (`easydata.text.engines.choose_engine`) on
        the adversarial set and the first window's plain documents this worker sees (a stream has no
        documents to sample before it starts), then checked on 1 % of documents as in a batch job."""
        if self._engine is None:
            spans = batch.spans or [None] * len(batch)
            sample = [t[:1000] for t, s in zip(batch.texts, spans) if s is None and t][:2000]
            if not sample:
                return None
            tokenize = self._config.tokenize
            choice, verified = self._tokenizer.choose_engine(tokenize.engine, sample, tokenize.add_bos is None)
            self._choice, self._engine = choice.to_manifest(), verified or False
        return self._engine or None

    def _engine_entry(self) -> Optional[dict[str, Any]]:
        """This window's part of the manifest's `tokenizer_engines` (`commit_window` adds windows up)."""
        if self._choice is None:
            return None
        return engine_entry(self._choice, collections.Counter(self._engine.take_counts()) if self._engine else None)

    def _documents_of(self, wid: str, messages: list[Any]):
        ds = self._dataset
        records = [(position, *parse_message(_data(m), getattr(m, "attributes", None)),
                    _data(m)[:200].decode("utf-8", "replace")) for position, m in enumerate(messages)]
        batch, rejects = collect_records(ds, ds.pubsub_subscription or ds.name, wid, records,
                                         max_document_bytes=self._config.tokenize.max_document_byte_limit,
                                         messages_field=self._config.chat.messages_field)
        return batch, rejects

    def _rows_of(self, batch, name: str, wid: str, rejects: list) -> tuple[Optional[pa.Table], int]:
        """The window's rows in key-hash order (packed when configured) and documents written; the chat
        stage's rejects are added to `rejects`."""
        if batch is None or not len(batch):
            return None, 0
        batch, chat_rejects = self._stages.render(batch)
        rejects.extend(chat_rejects)
        if not len(batch):
            return None, 0
        self._stages.engine = self._engine_for(batch)
        rows, counts = self._stages.rows(batch, self._stages.encode(batch))
        table = sort_group([rows])
        if not self._config.pack.enabled:
            return table, counts.documents  # documents, not rows: a windowed document is several rows
        packed, stats = pack_group(table, config=self._config.pack, pad_id=self._pad_id, seed=self._config.seed,
                                   dataset=f"{name}/{wid}", group=0)
        return pa.Table.from_batches(list(packed)), stats.documents

    def process(self, element: tuple[str, Iterable[Any]], win=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam) -> Iterator[dict[str, Any]]:
        name, messages = element
        messages = sorted(messages, key=lambda m: (getattr(m, "message_id", None) or "", _data(m)))
        wid = window_id(win.start.micros / 1e6, pane.index)
        if pane.timing == beam.utils.windowed_value.PaneInfoTiming.LATE:
            self._late.inc()
        batch, rejects = self._documents_of(wid, messages)
        table, written = self._rows_of(batch, name, wid, rejects)
        save, moves, shards, columns = self._config.save, [], [], {}
        if table is not None and table.num_rows:
            piece = Staging(self._staging).window_piece(name, wid)
            write_piece(table, piece)
            relative = f"{name}/{wid}-{shard_file_name(0, 1, save.format, save.codec)}"
            staged = Staging(self._staging).file(relative)
            schema = pa.schema([f for f in table.schema if f.name not in HIDDEN_COLUMNS])
            rows, tokens, padding = assemble_shard([piece], staged, save.format, table.schema,
                                                   compression=save.codec, row_group_size=save.row_group_size,
                                                   drop_columns=HIDDEN_COLUMNS)[:3]
            remove_file(piece)  # assembled: the staging area keeps no uncompressed copy of the window
            shards.append({"path": relative, "rows": rows, "tokens": tokens, "padding_tokens": padding,
                           "bytes": file_size(staged)})
            columns = {f.name: str(f.type) for f in schema}
            moves.append((staged, relative))
            self._rows.inc(rows)
            self._tokens.inc(tokens)
        rejected_files = []
        if rejects:
            relative = write_dead_letters(self._staging, dead_letter_path(name, wid), rejects)
            moves.append((Staging(self._staging).file(relative), relative))
            rejected_files.append(relative)
            self._rejected.inc(len(rejects))
        rejected = sum(r.records for r in rejects)
        self._documents.inc(written)
        output = {"shards": shards, "documents_in": written + rejected, "documents_written": written,
                  "documents_rejected": rejected, "padding_tokens": sum(s["padding_tokens"] for s in shards),
                  "columns": columns}
        engine = self._engine_entry()
        if engine is not None:
            output["engine"] = engine
        yield {"id": f"{name}/{wid}", "start": win.start.micros / 1e6, "end": win.end.micros / 1e6,
               "moves": moves, "rejected_files": rejected_files, "outputs": {name: output}}


def _data(message: Any) -> bytes:
    data = getattr(message, "data", message)
    return data if isinstance(data, bytes) else str(data).encode("utf-8")


class ProcessWindow(beam.PTransform):
    """One dataset's grouped window messages -> staged shard and dead letters -> commit records."""

    def __init__(self, *, config: PipelineConfig, dataset: DatasetConfig, tokenizer: TokenizerConfig,
                 template: Optional[str], pad_id: int, staging: str):
        super().__init__()
        self._fn = _ProcessWindowFn(config, dataset, tokenizer, template, pad_id, staging)

    def expand(self, grouped: beam.PCollection) -> beam.PCollection:
        return grouped | "Process" >> beam.ParDo(self._fn)


@classified_failures
class _CommitFn(beam.DoFn):
    """Serial per key (a stateful DoFn): one commit at a time rewrites the manifest."""

    COMMITTED = BagStateSpec("committed", StrUtf8Coder())

    def __init__(self, output_dir: str, base: dict[str, Any]):
        self._output_dir, self._base = output_dir, base
        self._windows = beam.metrics.Metrics.counter("easydata", "stream_windows_committed")

    def process(self, element: tuple[str, dict[str, Any]], committed=beam.DoFn.StateParam(COMMITTED)) -> Iterator[str]:
        _, info = element
        base = dict(self._base)
        columns = {c: t for out in info["outputs"].values() for c, t in out.get("columns", {}).items()}
        base["schema"] = {**base["schema"], "columns": {**base["schema"].get("columns", {}), **columns}}
        commit_window(self._output_dir, window=info["id"], start=info["start"], end=info["end"],
                      outputs=info["outputs"], moves=info["moves"], rejected_files=info["rejected_files"], base=base)
        committed.add(info["id"])
        self._windows.inc()
        yield info["id"]


class CommitWindows(beam.PTransform):
    """Commits windows one at a time (see module docstring); returns the committed window ids."""

    def __init__(self, *, output_dir: str, base: dict[str, Any]):
        super().__init__()
        self._output_dir, self._base = output_dir, base

    def expand(self, infos: beam.PCollection) -> beam.PCollection:
        return (infos
                | "Rewindow" >> beam.WindowInto(window.GlobalWindows(), trigger=trigger.Repeatedly(trigger.AfterCount(1)),
                                                accumulation_mode=trigger.AccumulationMode.DISCARDING)
                | "OneKey" >> beam.Map(lambda info: ("commit", info))
                | "Commit" >> beam.ParDo(_CommitFn(self._output_dir, self._base)))
