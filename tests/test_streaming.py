"""Streaming: message parsing, window names, window commits (pure), and the pipeline on a `TestStream`
run by Beam's streaming DirectRunner: windows fire, late data is handled, no token lost or duplicated."""

from __future__ import annotations

import json

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue
from tokenizers import Tokenizer

from beam_pipelines.streaming import build_streaming_pipeline
from easydata.config import PipelineConfig, StreamingConfig
from easydata.run.streaming import commit_window, parse_message, window_id
from easydata.tools.validate import validate_output
from tests.conftest import make_texts
from transforms.stream import _CountDroppedLateFn, _FindDroppedLateFn


def test_parse_message_adds_attributes_and_rejects_bad_messages():
    assert parse_message(b'{"text": "hi", "lang": "en"}', {"lang": "fr", "src": "crawler"}) == (
        {"text": "hi", "lang": "en", "src": "crawler"}, "")
    assert parse_message(b"\xff")[1] == "invalid UTF-8 at byte 0"
    assert parse_message(b"{nope")[1].startswith("malformed JSON")
    assert parse_message(b"[1, 2]")[1] == "record is a list, not an object"


def test_window_ids_sort_by_time_and_glob_cleanly():
    ids = [window_id(t, pane) for t, pane in [(1_700_000_060, 0), (1_700_000_000, 1), (1_700_000_000, 0)]]
    assert sorted(ids) == [ids[2], ids[1], ids[0]]
    assert ids[2] == "w20231114T221320Z-p000"
    assert all(c.isalnum() or c in "-" for c in "".join(ids))


def _base() -> dict:
    return {"config": {}, "fingerprint": "f", "tokenizer": {"vocab_size": 10}, "output_format": "parquet",
            "compression": "none", "schema": {"columns": {"input_ids": "list<item: int32>"}, "packed": False}}


def test_commit_window_lists_exactly_the_committed_windows(tmp_path):
    out = tmp_path / "out"
    staged = tmp_path / "stage"
    staged.mkdir()
    for i in range(2):
        (staged / f"s{i}").write_bytes(b"x")
        shard = {"path": f"web/w{i}-part-00000-of-00001.parquet", "rows": 2, "tokens": 5 + i, "padding_tokens": 0}
        manifest = commit_window(str(out), window=f"web/w{i}", start=60.0 * i, end=60.0 * (i + 1),
                                 outputs={"web": {"shards": [shard], "documents_in": 3, "documents_written": 2,
                                                  "documents_rejected": 1}},
                                 moves=[(str(staged / f"s{i}"), shard["path"])], rejected_files=[], base=_base())
    assert [w["id"] for w in manifest["windows"]] == ["web/w0", "web/w1"]
    assert manifest["datasets"]["web"]["tokens"] == 11 and manifest["totals"]["rows"] == 4
    assert manifest["documents_in"] == 6 and manifest["documents_rejected"] == 2
    assert sorted(p.name for p in (out / "web").iterdir()) == ["w0-part-00000-of-00001.parquet",
                                                                "w1-part-00000-of-00001.parquet"]
    again = commit_window(str(out), window="web/w1", start=60.0, end=120.0, outputs={}, moves=[],
                          rejected_files=[], base=_base())
    assert again == manifest  # a retried commit changes nothing
    assert json.loads((out / "manifest.json").read_text())["streaming"] is True


def run_test_stream(config: PipelineConfig, stream: TestStream, source: str = "live") -> dict:
    """Runs the streaming pipeline of `config` on `stream` (Beam's streaming DirectRunner) to the end; the
    manifest it committed."""
    out = config.save.output_dir
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
    build_streaming_pipeline(p, config, staging=f"{out}/.easydata-tmp-test", sources={source: p | stream})
    p.run().wait_until_finish()
    with open(f"{out}/manifest.json", encoding="utf-8") as f:
        return json.load(f)


def _message(i: int, text: str) -> PubsubMessage:
    return PubsubMessage(json.dumps({"text": text, "n": i}).encode(), {"origin": "test"}, message_id=f"m{i:04d}")


def _stream_with_late_messages(texts: list[str]) -> TestStream:
    """Messages 0-39 in window [0, 60), a broken one, messages 40-79 in [60, 120) after the watermark
    passed 60, then messages 80-89 of the closed window [0, 60) after it passed 130: late, dropped."""
    return (TestStream()
            .add_elements([TimestampedValue(_message(i, texts[i]), i) for i in range(40)])
            .add_elements([TimestampedValue(PubsubMessage(b"{broken", {}, message_id="bad"), 5)])
            .advance_watermark_to(60)
            .add_elements([TimestampedValue(_message(i, texts[i]), 20 + i) for i in range(40, 80)])
            .advance_watermark_to(130)
            .add_elements([TimestampedValue(_message(i, texts[i]), 10) for i in range(80, 90)])
            .advance_watermark_to_infinity())


@pytest.mark.slow
def test_late_messages_dropped_by_the_windows_are_found_and_counted():
    """`_FindDroppedLateFn` emits exactly the messages the windowed GroupByKey drops (80-89 below; the
    pipeline test checks those are missing from the output), and `_CountDroppedLateFn` counts them.
    (The counter's value is not read back: Beam's streaming DirectRunner loses the metrics of bundles
    after the first windows fire, here `stream_windows_committed` reads 1 of 2.)"""
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        late = (p | _stream_with_late_messages(make_texts(90, seed=8))
                | beam.Map(lambda m: ("live", m))
                | beam.ParDo(_FindDroppedLateFn(StreamingConfig(window_seconds=60))))
        assert_that(late | beam.MapTuple(lambda name, m: (name, m.message_id)),
                    equal_to([("live", f"m{i:04d}") for i in range(80, 90)]))
        _ = late | beam.ParDo(_CountDroppedLateFn())


@pytest.mark.parametrize("pack", [False, True])
def test_windows_fire_late_data_is_dropped_and_no_token_is_lost(tokenizer_dir, tmp_path, pack):
    texts = make_texts(90, seed=8)
    out = tmp_path / "out"
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "live", "pubsub_subscription": "projects/p/subscriptions/s",
                      "additional_fields": ["n", "origin"]}],
        "streaming": {"window_seconds": 60},
        "pack": {"enabled": pack, "seq_length": 256},  # longer than any document: one segment each
        "save": {"output_dir": str(out)},
    })
    manifest = run_test_stream(config, _stream_with_late_messages(texts))
    assert [w["id"] for w in manifest["windows"]] == ["live/w19700101T000000Z-p000", "live/w19700101T000100Z-p000"]
    assert manifest["documents_in"] == 81 and manifest["documents_rejected"] == 1
    assert manifest["documents_written"] == 80
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    expected = sorted(tok.encode(t).ids + [eos] for t in texts[:80])
    tables = [pq.read_table(out / s["path"]) for s in manifest["datasets"]["live"]["shards"]]
    if pack:  # every document's tokens appear once, in order, as a segment
        found = []
        for table in tables:
            for ids, segments in zip(table.column("input_ids").to_pylist(), table.column("segment_ids").to_pylist()):
                for seg in sorted(set(segments) - {0}):
                    found.append([t for t, s in zip(ids, segments) if s == seg])
        assert sorted(found) == expected
    else:
        found = sorted(ids for table in tables for ids in table.column("input_ids").to_pylist())
        assert found == expected
        assert {o for table in tables for o in table.column("origin").to_pylist()} == {"test"}
    assert sum(s["tokens"] for s in manifest["datasets"]["live"]["shards"]) == sum(len(e) for e in expected)
    assert validate_output(str(out)).ok
    assert (out / "rejected" / "live").is_dir()
    # The staging area keeps no copy of a committed window (it used to keep an uncompressed Arrow piece of
    # every window: 7.9 MB for a 0.9 MB window shard, growing with the stream).
    staged = sorted(p.relative_to(out).as_posix() for p in (out / ".easydata-tmp-test").rglob("*") if p.is_file())
    assert staged == [], staged


@pytest.mark.slow
def test_a_stream_encodes_with_a_verified_fast_engine_and_the_same_ids(qwen3_tokenizer_dir, tmp_path):
    """`tokenize.engine: auto` in the streaming pipeline: each worker chooses at its first window's plain
    documents (and the adversarial set), the window shards hold `engine: hf`'s ids, and the manifest's
    `tokenizer_engines` adds up the windows' checks (validate reads it)."""
    texts = make_texts(90, seed=8)

    def run(engine: str) -> dict:
        out = tmp_path / engine
        config = PipelineConfig.from_dict({
            "default_tokenizer": str(qwen3_tokenizer_dir),
            "datasets": [{"name": "live", "pubsub_subscription": "projects/p/subscriptions/s"}],
            "streaming": {"window_seconds": 60}, "tokenize": {"engine": engine},
            "pack": {"enabled": True, "seq_length": 256}, "save": {"output_dir": str(out)}})
        options = PipelineOptions()
        options.view_as(StandardOptions).streaming = True
        p = beam.Pipeline(runner=BundleBasedDirectRunner(), options=options)
        build_streaming_pipeline(p, config, staging=str(out / ".easydata-tmp-test"),
                                 sources={"live": p | _stream_with_late_messages(texts)})
        p.run().wait_until_finish()
        manifest = json.loads((out / "manifest.json").read_text())
        assert validate_output(str(out)).ok
        manifest["rows"] = {s["path"]: pq.read_table(out / s["path"]).to_pylist()
                            for s in manifest["datasets"]["live"]["shards"]}
        return manifest

    fast, hf = run("auto"), run("hf")
    assert fast["rows"] == hf["rows"] and sum(len(rows) for rows in fast["rows"].values()) > 0
    engine = fast["tokenizer_engines"]["live"]
    assert (engine["name"], engine["requested"], engine["reason"]) == ("fastokens", "auto", "verified equal to hf")
    assert engine["while_running"]["documents"] == fast["documents_written"] == 80
    assert engine["while_running"]["mismatches"] == 0 and engine["verified_at_planning"]["adversarial"] > 200
    assert hf["tokenizer_engines"]["live"]["name"] == "hf" and "while_running" not in hf["tokenizer_engines"]["live"]


def test_commit_window_adds_up_the_windows_engine_checks(tmp_path):
    """Two windows encoded by a fast engine and one by a worker that chose hf: the entry names the fast
    engine, counts its windows, and a mismatch in any window fails validate."""
    fast = {"name": "fastokens", "version": "0.3.5", "requested": "auto", "reason": "verified equal to hf",
            "verified_at_planning": {"documents": 40, "adversarial": 299}}
    windows = [{**fast, "while_running": {"documents": 40, "verified": 1, "mismatches": 0, "switched_to_hf_documents": 0}},
               {"name": "hf", "version": "0.22.1", "requested": "auto", "reason": "fastokens differs from hf: ..."},
               {**fast, "while_running": {"documents": 30, "verified": 2, "mismatches": 1, "switched_to_hf_documents": 0}}]
    out = tmp_path / "out"
    out.mkdir()
    for i, engine in enumerate(windows):
        manifest = commit_window(str(out), window=f"web/w{i}", start=60.0 * i, end=60.0 * (i + 1),
                                 outputs={"web": {"shards": [], "documents_in": 0, "documents_written": 0,
                                                  "documents_rejected": 0, "engine": engine}},
                                 moves=[], rejected_files=[], base=_base())
        if i == 1:
            assert manifest["tokenizer_engines"]["web"]["name"] == "fastokens"  # a worker chose hf: still named
    entry = manifest["tokenizer_engines"]["web"]
    assert entry["while_running"] == {"documents": 70, "verified": 3, "mismatches": 1, "switched_to_hf_documents": 0}
    report = validate_output(str(out))
    assert any("tokenizer engine fastokens gave other ids than hf on 1 of 3" in p for p in report.problems)


def _live_config(tmp_path, tokenizer_dir, event_time=None) -> PipelineConfig:
    return PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "live", "pubsub_subscription": "projects/my-project/subscriptions/docs"}],
        "streaming": {"window_seconds": 60, **({"event_time": event_time} if event_time else {})},
        "save": {"output_dir": str(tmp_path / "out")}})


@pytest.mark.parametrize("runner, event_time, by_arrival", [
    ("DataflowRunner", None, False), (None, None, True), (None, "publish", False), ("DataflowRunner", "arrival", True)],
    ids=["dataflow-default", "local-default", "local-publish", "dataflow-arrival"])
def test_event_time_defaults_to_publish_time_on_dataflow_and_arrival_time_locally(
        runner, event_time, by_arrival, tmp_path, tokenizer_dir, monkeypatch):
    """The job graph each runner gets: Dataflow windows a message by its publish time (its watermark waits
    for the backlog), the local runner by the time it reads it (its watermark is the wall clock, so a
    backlog would be late); `streaming.event_time` overrides either (docs/streaming.md)."""
    from beam_pipelines.streaming import build_streaming_job
    from tests.test_dataflow_template import IMAGE, OFFLINE_DATAFLOW_ARGS

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "localhost:1")  # the local reader needs no credentials (not contacted)
    args = [*OFFLINE_DATAFLOW_ARGS, f"--sdk_container_image={IMAGE}", "--enable_streaming_engine"] if runner else []
    pipeline = build_streaming_job(_live_config(tmp_path, tokenizer_dir, event_time), args)
    names = {t.unique_name for t in pipeline.to_runner_api().components.transforms.values()}
    assert "Read[live]" in names
    assert any(name.endswith("ArrivalTime") for name in names) is by_arrival, sorted(names)


def test_a_backlog_read_at_once_is_windowed_by_publish_time(tokenizer_dir, tmp_path):
    """Dataflow's behaviour: messages published over three minutes and read together in one bundle (a
    backlog after a restart) land in the windows of their publish times, not in one window of when they
    were read."""
    texts = make_texts(30, seed=9)
    stream = (TestStream()
              .add_elements([TimestampedValue(_message(i, texts[i]), 10 + 6 * i) for i in range(30)])  # 10-184 s
              .advance_watermark_to_infinity())
    manifest = run_test_stream(_live_config(tmp_path, tokenizer_dir), stream)
    assert [w["id"] for w in manifest["windows"]] == [
        "live/w19700101T000000Z-p000", "live/w19700101T000100Z-p000", "live/w19700101T000200Z-p000",
        "live/w19700101T000300Z-p000"]
    assert manifest["documents_written"] == 30


def test_a_subscription_the_check_refuses_names_the_rule_it_broke(tmp_path):
    """`projects/my-project/subscriptions/s` was refused with the project id's rule only: the name (3-255
    characters) is what is wrong."""
    from beam_pipelines.streaming import build_streaming_job
    from easydata.errors import ConfigError

    config = PipelineConfig.from_dict({
        "default_tokenizer": "tokenizer", "save": {"output_dir": str(tmp_path / "out")},
        "datasets": [{"name": "live", "pubsub_subscription": "projects/my-project/subscriptions/s"}]})
    with pytest.raises(ConfigError, match="a name 3-255 letters, digits or -_.~\\+%, starting with a letter"):
        build_streaming_job(config)
