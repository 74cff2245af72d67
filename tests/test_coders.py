"""Coders of the bulk elements: exact round trips, sizes measured without encoding, and the batch job's
PCollections of record batches and document batches actually using them."""

from __future__ import annotations

import pytest
import json
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import BytesCoder, VarIntCoder, registry
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.batch import build_batch_job
from beam_pipelines.runners import make_runner_and_options
from easydata.config import PipelineConfig
from easydata.io.sources import DocumentBatch
from tests.conftest import write_jsonl
from transforms.coders import DocumentBatchCoder, KeyedBatch, RecordBatchCoder
from transforms.shuffle import KEYED_ROWS_CODER


def _rows() -> pa.RecordBatch:
    ids = pa.array([[1, 2, 3], [], [4]], type=pa.list_(pa.int32()))
    schema = pa.schema([("input_ids", ids.type), ("__key__", pa.string())], metadata={b"origin": b"test"})
    return pa.record_batch([ids, pa.array(["a", "b", None])], schema=schema)


def test_record_batch_round_trip_keeps_values_types_and_metadata():
    coder = registry.get_coder(pa.RecordBatch)
    assert isinstance(coder, RecordBatchCoder)
    for batch in (_rows(), _rows().slice(1, 2), _rows().slice(0, 0)):
        decoded = coder.decode(coder.encode(batch))
        assert decoded.equals(batch)
        assert decoded.schema.metadata == batch.schema.metadata


def test_record_batch_size_is_its_buffers_not_an_encoding():
    batch = _rows()
    assert RecordBatchCoder().estimate_size(batch) == batch.nbytes
    keyed = registry.get_coder(KeyedBatch)
    assert keyed.estimate_size((7, batch)) >= batch.nbytes


def test_document_batch_round_trip_and_size():
    batch = DocumentBatch(dataset="d", keys=["d@0", "d@1"], texts=["hello", "wörld"], fields={"id": [1, 2]},
                          input_bytes=40, unit=3, index=1)
    coder = registry.get_coder(DocumentBatch)
    assert isinstance(coder, DocumentBatchCoder)
    assert coder.decode(coder.encode(batch)) == batch
    assert coder.estimate_size(batch) == 40
    assert coder.estimate_size(DocumentBatch(dataset="d", keys=["k"], texts=["abc"], fields={})) == 3


@pytest.mark.slow
def test_record_batches_cross_a_fusion_break_intact():
    runner, options = make_runner_and_options([])
    with beam.Pipeline(runner=runner, options=options) as p:
        batches = (p | beam.Create([0, 1, 2])
                   | beam.Map(lambda i: _rows().slice(i, 1)).with_output_types(pa.RecordBatch)
                   | beam.Reshuffle() | beam.Map(lambda b: b.to_pylist()[0]["__key__"]))
        assert_that(batches, equal_to(["a", "b", None]))


def test_batch_job_declares_its_bulk_element_types(tmp_path: Path, tokenizer_dir: Path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": f"document {i}"} for i in range(5)])
    config = PipelineConfig.from_dict(json.loads(json.dumps({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "d", "data_files": str(data), "type": "jsonl"}],
        "pack": {"enabled": True, "seq_length": 16},
        "save": {"output_dir": str(tmp_path / "out")},
    })))
    pipeline, _ = build_batch_job(config, [])
    coders = {}

    class Visit(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            for tag, out in node.outputs.items():
                if tag is None:
                    coders[node.full_label] = registry.get_coder(out.element_type)

    pipeline.visit(Visit())
    assert isinstance(coders["Read[d]/Read/ParDo(_ReadSplitsFn)"], DocumentBatchCoder)
    assert isinstance(coders["Tokenize[d]/Encode/ParDo(_TokenizeFn)"], RecordBatchCoder)
    assert isinstance(coders["Pack[d]/GroupDocuments/Group/MapGroupFiles"].coders()[1].value_coder(), RecordBatchCoder)
    # What crosses the shuffle: (group, compactly encoded rows), Beam's own key and bytes coders.
    assert coders["Pack[d]/GroupDocuments/RouteToGroups"] == KEYED_ROWS_CODER
    assert [type(c) for c in KEYED_ROWS_CODER.coders()] == [VarIntCoder, BytesCoder]
