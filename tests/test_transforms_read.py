"""`ReadDocuments` wiring under `TestPipeline` (Beam's own DirectRunner, offline fallback)."""

from __future__ import annotations

import pytest
import json

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from easydata.config import DatasetConfig
from easydata.io.sources import plan_splits, work_units
from easydata.run.staged_units import write_units
from tests.conftest import write_jsonl
from transforms import REJECTED_TAG, STATS_TAG, ReadDocuments, SumCounters

pytestmark = pytest.mark.slow


def _staged(staging, dataset, splits) -> list[int]:
    """Records the splits' work units where `ReadDocuments` looks them up (as the launcher does); their ids."""
    units = work_units(dataset, splits)
    write_units(str(staging), dataset.name, units)
    return [unit[0].index for unit in units]


def test_documents_stats_and_dead_letters(tmp_path):
    records = [{"text": f"doc {i}"} for i in range(30)] + [{"text": 5}, {"other": "x"}]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    dataset = DatasetConfig(name="d", data_files=str(path))
    splits = plan_splits(dataset, target_bytes=100)  # several byte-range splits
    assert len(splits) > 3
    staging = tmp_path / "staging"
    with TestPipeline() as p:
        read = p | ReadDocuments(dataset=dataset, units=_staged(staging, dataset, splits), batch_size=4,
                                 max_document_bytes=None, staging=str(staging))
        texts = read.documents | beam.FlatMap(lambda batch: batch.texts)
        assert_that(texts, equal_to([f"doc {i}" for i in range(30)]), label="AllDocuments")
        totals = (read[STATS_TAG] | beam.CombineGlobally(SumCounters())
                  | beam.Map(lambda c: (c.count("d")["documents_in"], c.count("d")["documents_rejected"])))
        assert_that(totals, equal_to([(32, 2)]), label="Counters")
        assert_that(read[REJECTED_TAG] | beam.combiners.Count.Globally(), equal_to([1]), label="OneRejectFile")
    rejected = [json.loads(line) for f in (staging / "rejected").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(r["reason"] for r in rejected) == ["content field 'text' is a int, not a string",
                                                    "missing content field 'text'"]


def test_reading_reports_the_documents_with_the_bytes_they_came_from(tmp_path):
    """The progress a run shows counts documents as they are read, beside their input bytes: on a runner
    that reads ahead of tokenizing (Dask) a line said `100.0% of input read: 0 documents read` (documents
    were counted only once tokenized)."""
    from easydata.run.progress import read_progress

    path = write_jsonl(tmp_path / "in.jsonl", [{"text": f"doc {i}"} for i in range(30)] + [{"other": "x"}])
    dataset = DatasetConfig(name="d", data_files=str(path))
    progress = tmp_path / "progress"
    with TestPipeline() as p:
        staging = tmp_path / "staging"
        units = _staged(staging, dataset, plan_splits(dataset, target_bytes=100))
        _ = p | ReadDocuments(dataset=dataset, units=units, batch_size=4, max_document_bytes=None, staging=str(staging),
                              progress_dir=str(progress))
    counts = read_progress(str(progress))
    assert (counts["documents"], counts["tokens"]) == (30, 0)
    assert counts["input_bytes"] == path.stat().st_size  # a unit's last record rejected: its bytes too
    assert counts["units"] == len(units) > 3


def test_a_resumed_unit_reports_all_its_bytes_and_itself(tmp_path, tokenizer_dir):
    """A loaded unit's progress: its batches' bytes and those its reading counted after its last batch (in its
    counters), and the unit, so a resumed run's progress ends at 100 %."""
    import pyarrow as pa

    from easydata.config import TokenizerConfig, TokenizeStageConfig
    from easydata.run.checkpoint import batch_path, write_batch
    from easydata.run.counters import RunCounters
    from easydata.run.checkpoint import write_unit
    from easydata.run.progress import read_progress
    from transforms.tokenize import Tokenize

    staging = str(tmp_path / "staging")
    path = batch_path(staging, "d", 0, 0)
    rows = pa.RecordBatch.from_pydict({"input_ids": pa.array([[1, 2, 3], [4, 5]], pa.list_(pa.int32()))})
    write_batch(path, rows, {"input_bytes": 100})
    stats = RunCounters.of("d", documents_in=3, documents_rejected=1, input_bytes=130).to_json()
    write_unit(staging, "d", 0, batches=1, stats=stats, rejected_file=None)
    write_units(staging, "d", [])  # the launcher records the units it reads; a loaded one is not read
    progress = tmp_path / "progress"
    dataset = DatasetConfig(name="d", data_files=str(tmp_path / "unused.jsonl"))
    with TestPipeline() as p:
        read = p | ReadDocuments(dataset=dataset, units=[0], batch_size=4, max_document_bytes=None, staging=staging,
                                 progress_dir=str(progress), resumed=[0])
        _ = read.documents | Tokenize(dataset="d", tokenizer=TokenizerConfig(name_or_path=str(tokenizer_dir)),
                                      config=TokenizeStageConfig(), seed=0, progress_dir=str(progress))
    counts = read_progress(str(progress))
    assert (counts["input_bytes"], counts["documents"], counts["tokens"], counts["units"]) == (130, 2, 5, 1)
