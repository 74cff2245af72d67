"""A large compressed line file read in parts by several workers (`input_formats.lines.compressed_ranges`):
the parts give exactly what reading the file whole gives (documents, keys, dead letters), in any number."""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import json
import lzma
import random
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from easydata.figures import size
from easydata.config import DatasetConfig, PipelineConfig
from easydata.io.filesystems import decompressed_size
from easydata.io.input_formats.lines import MAX_COMPRESSED_PARTS, compressed_parts, compressed_ranges
from easydata.io.sampling import sample_texts, spread
from easydata.io.sources import plan_input, read_splits, work_units
from easydata.run.run_plan import prepare_run

_WRITERS = {"gz": gzip.compress, "zst": lambda data: zstandard.ZstdCompressor().compress(data),
            "bz2": bz2.compress, "xz": lzma.compress}


def _lines(count: int, seed: int) -> bytes:
    """JSON lines of varied length (some long, one not JSON, one without the content field), a BOM first."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i == count // 3:
            out.append(b"{not json")
        elif i == count // 2:
            out.append(json.dumps({"other": i}).encode())
        else:
            words = " ".join(f"w{rng.randrange(10**6)}" for _ in range(rng.choice([1, 5, 40, 400])))
            out.append(json.dumps({"text": f"{i} {words}"}).encode())
    return b"\xef\xbb\xbf" + b"\n".join(out) + b"\n"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(_WRITERS[path.suffix[1:]](data))
    return path


def _read(ds: DatasetConfig, splits) -> tuple[list, list]:
    """Documents (key, text) and dead letters (position, reason) of `splits`, each read on its own as a worker
    reads its unit."""
    documents, rejected = [], []
    for split in splits:
        rejects: list = []
        for batch in read_splits([split], ds, batch_size=17, rejects=rejects):
            documents.extend(zip(batch.keys, batch.texts))
        rejected.extend((r.position, r.reason.split(":")[0].split(" after ")[0]) for r in rejects)
    return documents, rejected


def _job(tmp_path: Path, tokenizer_dir: Path, path: Path) -> PipelineConfig:
    return PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir),
                                     "datasets": [{"name": "d", "data_files": str(path)}],
                                     "save": {"output_dir": str(tmp_path / "out")}})


@pytest.mark.parametrize("suffix", sorted(_WRITERS))
def test_parts_read_what_the_whole_file_gives(tmp_path, suffix):
    path = _write(tmp_path / f"data.jsonl.{suffix}", _lines(600, seed=1))
    ds = DatasetConfig(name="d", data_files=str(path), type="jsonl")
    whole = plan_input(ds, target_bytes=1 << 30).splits
    assert len(whole) == 1 and whole[0].end is None
    parts = plan_input(ds, target_bytes=4096, readers=4).splits
    assert len(parts) == 4 and parts[0].start == 0 and parts[-1].end is None
    assert [p.end for p in parts[:-1]] == [p.start for p in parts[1:]]  # contiguous decompressed ranges
    assert sum(p.size for p in parts) == whole[0].size  # the plan's input bytes do not change
    assert len(work_units(ds, parts, 4096)) == 4  # a unit each: several workers read the file
    expected = _read(ds, whole)
    assert len(expected[0]) == 598 and len(expected[1]) == 2
    got = _read(ds, parts)
    assert got == expected
    assert all(len(_read(ds, [p])[0]) > 0 for p in parts)  # each part has its share


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 300), min_size=1, max_size=60), parts=st.integers(2, 6),
       skew=st.floats(0.3, 3.0))
def test_any_cut_reads_every_line_once(tmp_path, lengths, parts, skew):
    """Bounds anywhere (inside lines, on newlines, past the end: an estimate that is off), empty lines too."""
    data = b"".join((json.dumps({"text": "x" * n}).encode() if n else b"") + b"\n" for n in lengths)
    path = tmp_path / "data.jsonl.gz"
    path.write_bytes(gzip.compress(data))
    ds = DatasetConfig(name="d", data_files=str(path), type="jsonl")
    whole = plan_input(ds, target_bytes=1 << 30).splits
    total = int(len(data) * skew)
    bounds = sorted({total * i // parts for i in range(parts)})
    cut = [dataclasses.replace(whole[0], start=a, end=b, index=i)
           for i, (a, b) in enumerate(zip(bounds, [*bounds[1:], None]))]
    assert _read(ds, cut) == _read(ds, whole)


def test_a_truncated_stream_is_one_dead_letter_whichever_part_meets_it(tmp_path):
    """Cut anywhere: in a part, in the line a part reads past its end, before a part (which reads nothing)."""
    data = _lines(300, seed=2)
    complete = gzip.compress(data)
    path = tmp_path / "cut.jsonl.gz"
    ds = DatasetConfig(name="d", data_files=str(path), type="jsonl")
    for cut in range(len(complete) // 40, len(complete), len(complete) // 40):
        path.write_bytes(complete[:cut])
        whole = plan_input(ds, target_bytes=1 << 30).splits
        parts = [dataclasses.replace(whole[0], start=len(data) * i // 4, end=len(data) * (i + 1) // 4 if i < 3 else None,
                                     index=i) for i in range(4)]  # the complete file's bounds: some lie past the cut
        documents, rejected = _read(ds, whole)
        assert rejected[-1][1].startswith("unreadable input"), cut
        got_documents, got_rejected = _read(ds, parts)
        assert got_documents == documents, cut
        assert [r[1] for r in got_rejected] == [r[1] for r in rejected], cut  # one for the cut, as reading it whole


def test_how_many_parts():
    mb = 2**20
    assert compressed_parts(100 * mb, 100 * mb, 8 * mb, readers=2) == 2  # one large file: a part per reader
    assert compressed_parts(100 * mb, 100 * mb, 8 * mb, readers=64) == MAX_COMPRESSED_PARTS
    assert compressed_parts(100 * mb, 200 * mb, 8 * mb, readers=4) == 2  # two files: half the readers each
    assert compressed_parts(100 * mb, 400 * mb, 8 * mb, readers=4) == 1  # as many files as readers: whole
    assert compressed_parts(100 * mb, 100 * mb, 8 * mb, readers=1) == 1
    assert compressed_parts(6 * mb, 6 * mb, 8 * mb, readers=8) == 1  # no larger than a split
    assert compressed_parts(20 * mb, 20 * mb, 8 * mb, readers=8) == 2  # one part per split's bytes at most


def test_decompressed_size_from_the_file_and_its_start(tmp_path):
    data = _lines(3000, seed=3)
    for suffix in sorted(_WRITERS):
        path = _write(tmp_path / f"d.jsonl.{suffix}", data)
        size = path.stat().st_size
        assert decompressed_size(str(path), size) == len(data), suffix  # smaller than the sample: exact
        assert decompressed_size(str(path), size // 2) == len(data) * (size // 2) // size
    big = b"".join(_lines(400, seed=s) for s in range(60))  # larger than the 4 MiB sample once compressed
    assert len(gzip.compress(big)) > 4 * 2**20 or len(big) > 12 * 2**20
    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress(big))
    assert decompressed_size(str(path), path.stat().st_size) == len(big)  # gzip's trailer
    members = tmp_path / "members.jsonl.gz"  # the trailer is the last member's: the start's ratio instead
    members.write_bytes(gzip.compress(big) + gzip.compress(b'{"text": "end"}\n'))
    estimate = decompressed_size(str(members), members.stat().st_size)
    assert 0.5 * len(big) < estimate < 2 * len(big)
    assert decompressed_size(str(tmp_path / "plain.jsonl"), 123) == 123  # not compressed: as it is
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all" * 100)
    assert decompressed_size(str(bad), 1500) == 1500  # reading it reports the damage


def test_decompressed_size_reads_across_the_frames_and_members_of_its_sample(tmp_path):
    """A decompressor stops at the end of one frame or member. pzstd's files open with a skippable frame (the
    estimate was 0: every shuffle group sized for no text, a progress of nothing, no parts), and a bgzip file
    is members of 64 KiB (the estimate was that of its first member)."""
    import struct

    rng = random.Random(5)
    data = b"".join(json.dumps({"text": " ".join(f"w{rng.randrange(10**9)}" for _ in range(60))}).encode() + b"\n"
                    for _ in range(40_000))
    blocks = [data[i:i + 65_536] for i in range(0, len(data), 65_536)]
    pieces = []
    for block in blocks:  # as pzstd writes: a skippable frame giving the next frame's size, then the frame
        frame = zstandard.ZstdCompressor(write_content_size=False).compress(block)
        pieces.append(struct.pack("<II", 0x184D2A50, 4) + struct.pack("<I", len(frame)) + frame)
    pzstd = tmp_path / "p.jsonl.zst"
    pzstd.write_bytes(b"".join(pieces))
    bgzip = tmp_path / "b.jsonl.gz"
    bgzip.write_bytes(b"".join(gzip.compress(block) for block in blocks))
    for path in (pzstd, bgzip):
        assert path.stat().st_size > 4 * 2**20  # past the sample: the estimate is the sample's ratio
        estimate = decompressed_size(str(path), path.stat().st_size)
        assert 0.8 * len(data) < estimate < 1.25 * len(data), path.name


def test_ranges_follow_the_estimate_and_end_open(tmp_path):
    data = _lines(300, seed=4)
    path = _write(tmp_path / "d.jsonl.zst", data)
    ranges = compressed_ranges(str(path), path.stat().st_size, 3)
    assert [r[0] for r in ranges] == [0, len(data) // 3, 2 * len(data) // 3] and ranges[-1][1] is None
    tiny = _write(tmp_path / "t.jsonl.gz", b"{}\n")
    assert len(compressed_ranges(str(tiny), tiny.stat().st_size, 8)) == 3  # fewer bytes than parts


def test_planning_samples_only_the_start_of_a_compressed_file(tmp_path):
    """A part past the start is reached only by decompressing what lies before it: not sampled there."""
    path = _write(tmp_path / "data.jsonl.gz", _lines(600, seed=5))
    ds = DatasetConfig(name="d", data_files=str(path), type="jsonl")
    parts = plan_input(ds, target_bytes=4096, readers=4).splits
    assert spread(parts[0], 4) == [dataclasses.replace(parts[0], end=None)] and all(spread(p, 4) == [] for p in parts[1:])
    whole = plan_input(ds, target_bytes=1 << 30).splits
    assert sample_texts(ds, parts, documents=400) == sample_texts(ds, whole, documents=400)  # past the first part


def test_resume_plans_the_interrupted_runs_parts(tmp_path, tokenizer_dir, monkeypatch):
    """The parts follow the machine's cores; a run resumed with other cores reads the interrupted run's."""
    path = _write(tmp_path / "data.jsonl.gz", _lines(600, seed=6))
    config = _job(tmp_path, tokenizer_dir, path)
    monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: 4)
    interrupted = prepare_run(config, split_bytes=4096)
    assert len(interrupted.datasets[0].splits) == 4 and interrupted.datasets[0].readers == 4
    monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: 2)
    assert len(plan_input(config.datasets[0], target_bytes=4096, readers=2).splits) == 2  # this machine's parts
    resumed = prepare_run(config, resume=True, split_bytes=4096)
    assert resumed.resumed and resumed.run_id == interrupted.run_id
    assert resumed.datasets[0].splits == interrupted.datasets[0].splits and resumed.unit_count == 4
    info = json.loads(next((tmp_path / "out").rglob("run.json")).read_text())
    assert info["readers"] == {"d": 4}


def test_a_run_reads_a_large_compressed_file_in_parts_and_writes_the_same_shards(tmp_path, tokenizer_dir,
                                                                                monkeypatch):
    """The real pipeline on two workers, the file read in 2 parts, against one reader reading it whole."""
    import hashlib

    from beam_pipelines.batch import run_batch
    from tests.conftest import make_texts

    lines = [json.dumps({"text": t, "id": i}) for i, t in enumerate(make_texts(900, seed=8))]
    lines.insert(300, "{not json")
    path = tmp_path / "in" / "corpus.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))

    def run(name: str, cores: int):
        monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: cores)
        config = PipelineConfig.from_dict({
            "seed": 3, "default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "web", "data_files": str(path), "additional_fields": ["id"]}],
            "pack": {"enabled": True, "seq_length": 128},
            "save": {"output_dir": str(tmp_path / name), "num_shards": 2}})
        plan = plan_input(config.datasets[0], target_bytes=4096, readers=cores)
        assert len(plan.splits) == cores
        manifest = run_batch(config, [f"--direct_num_workers={cores}"], show_progress=False, split_bytes=4096).manifest
        shards = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / name).rglob("part-*"))}
        dead = sorted(p.read_bytes() for p in (tmp_path / name / "rejected").rglob("*") if p.is_file())
        return shards, manifest, dead

    whole, in_parts = run("whole", 1), run("parts", 2)
    assert len(whole[0]) == 2 and in_parts[0] == whole[0]
    for key in ("documents_in", "documents_written", "documents_rejected"):
        assert in_parts[1][key] == whole[1][key], key
    assert whole[1]["documents_rejected"] == 1 and whole[2] and in_parts[2] == whole[2]


def test_the_dry_run_estimates_a_file_read_in_parts_as_the_file_whole(tmp_path, tokenizer_dir, monkeypatch):
    """Its later parts are not sampled (reaching them decompresses the file): the first part gets their share."""
    from easydata.run.dry_run import plan_report

    path = _write(tmp_path / "data.jsonl.gz", _lines(600, seed=7))
    config = _job(tmp_path, tokenizer_dir, path)
    monkeypatch.setattr("easydata.io.sources.split_size", lambda *args, **kwargs: 4096)
    reports = {}
    for cores in (1, 4):
        monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: cores)
        reports[cores] = plan_report(config).datasets[0]
    assert (reports[1].splits, reports[4].splits) == (1, 4)
    assert reports[4].sampled_records == reports[1].sampled_records == 600
    assert abs(reports[4].estimated_tokens - reports[1].estimated_tokens) <= 4


def test_a_run_interrupted_before_parts_existed_resumes_with_the_file_whole(tmp_path, tokenizer_dir, monkeypatch):
    """Its `run.json` records no readers: the file was one unit then, and is re-planned so."""
    path = _write(tmp_path / "data.jsonl.gz", _lines(600, seed=9))
    config = _job(tmp_path, tokenizer_dir, path)
    monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: 1)
    interrupted = prepare_run(config, split_bytes=4096)
    assert len(interrupted.datasets[0].splits) == 1
    run_json = next((tmp_path / "out").rglob("run.json"))
    info = json.loads(run_json.read_text())
    del info["readers"]
    run_json.write_text(json.dumps(info))
    monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: 2)
    resumed = prepare_run(config, resume=True, split_bytes=4096)
    assert resumed.resumed and resumed.run_id == interrupted.run_id and len(resumed.datasets[0].splits) == 1


def test_a_compressed_input_counts_its_text_for_groups_progress_and_the_dry_run(tmp_path, tokenizer_dir):
    """Counted at its file size, a `.gz` made shuffle groups ~5x the intended size (peak memory with them), and
    the progress reached "100 % of input read" a fifth of the way (its reading counts decompressed bytes)."""
    from easydata.io.sources import RATIO_FILES, text_bytes
    from easydata.run.dry_run import plan_report

    data = _lines(3000, seed=10)
    plain = tmp_path / "plain" / "data.jsonl"
    plain.parent.mkdir()
    plain.write_bytes(data)
    packed = _write(tmp_path / "data.jsonl.gz", data)
    plans = {}
    for name, path in (("plain", plain), ("gz", packed)):
        plans[name] = prepare_run(_job(tmp_path / name, tokenizer_dir, path), group_bytes=64 * 1024).datasets[0]
    assert plans["gz"].input_bytes == plans["plain"].input_bytes == len(data)
    assert plans["gz"].num_groups == plans["plain"].num_groups > 2
    report = plan_report(_job(tmp_path, tokenizer_dir, packed)).datasets[0]
    assert (report.input_bytes, report.text_bytes) == (packed.stat().st_size, len(data))
    assert f"{size(packed.stat().st_size)} (about {size(len(data))} to read, uncompressed)" in \
        plan_report(_job(tmp_path, tokenizer_dir, packed)).to_text()
    many = tmp_path / "many"  # more files than are looked at: the others at the ratio of those that are
    many.mkdir()
    sizes = [len(_write(many / f"{i:02}.jsonl.zst", _lines(100 + 40 * i, seed=i)).read_bytes())
             for i in range(RATIO_FILES + 4)]
    texts = sum(len(_lines(100 + 40 * i, seed=i)) for i in range(RATIO_FILES + 4))
    many_ds = DatasetConfig(name="m", data_files=str(many / "*.zst"), type="jsonl")
    splits = plan_input(many_ds).splits
    assert sum(s.size for s in splits) == sum(sizes)
    assert abs(text_bytes(splits, many_ds) - texts) < 0.03 * texts


def test_text_read_by_line_is_cut_alike(tmp_path):
    lines = [f"line {i} " + "word " * (i % 50) for i in range(800)]
    path = _write(tmp_path / "data.txt.bz2", ("\n".join(lines) + "\n").encode())
    ds = DatasetConfig(name="d", data_files=str(path), type="txt", sample_by="line")
    parts = plan_input(ds, target_bytes=256, readers=3).splits
    assert len(parts) == 3
    documents, rejected = _read(ds, parts)
    assert documents == _read(ds, plan_input(ds, target_bytes=1 << 30).splits)[0] and not rejected
    assert [text for _, text in documents] == [line.strip() for line in lines]
    whole_text = DatasetConfig(name="d", data_files=str(path), type="txt", sample_by="document")  # never cut
    assert len(plan_input(whole_text, target_bytes=256, readers=3).splits) == 1
