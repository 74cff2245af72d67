"""One owner per concept (issue 43): the defects that came from a concept defined in several places.

Each test failed on the code before its fix: a fingerprint built from a deny-list (settings that do not
shape the output blocked `--resume`), and `--output` re-parsed as a YAML value.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import easydata.config as config_module
from easydata.config import PipelineConfig
from tests.conftest import REPO_ROOT, make_texts, write_jsonl


def _classes() -> dict[str, type]:
    return {name: getattr(config_module, name) for name in config_module.SHAPING_FIELDS}


def test_every_config_field_is_classified_as_shaping_the_output_or_not() -> None:
    """An allow-list: a new field must be put on one side, or the fingerprint would silently ignore it."""
    for name, cls in _classes().items():
        fields = {f.name for f in dataclasses.fields(cls)}
        shaping, other = set(config_module.SHAPING_FIELDS[name]), set(config_module.NOT_SHAPING[name])
        assert shaping | other == fields and not shaping & other, name
    # Every config class a shaping field holds is classified too (its fields are hashed through it).
    nested = {n for cls in _classes().values() for f in dataclasses.fields(cls)
              if f.name in config_module.SHAPING_FIELDS[cls.__name__]
              for n in dir(config_module) if isinstance(getattr(config_module, n), type) and n in str(f.type)
              and dataclasses.is_dataclass(getattr(config_module, n))}
    assert nested <= set(_classes()), nested - set(_classes())


_BASE = {"default_tokenizer": "tok", "datasets": [{"name": "web", "data_files": "web.jsonl"}]}


@pytest.mark.parametrize("change", [
    {"streaming": {"window_seconds": 7}},
    {"mix": None, "pack": {"enabled": True, "shuffle_buffer_factor": 99, "shuffle_packed": False}},
    {"datasets": [{"name": "web", "data_files": "web.jsonl", "tokenizer_kwargs": {"use_fast": True}}]},
    {"save": {"overwrite": True, "push_to_hub": True, "hub_repo_id": "me/x", "output_dir": "elsewhere"}},
    {"max_rejected_fraction": 0.5, "allow_empty_datasets": True},
], ids=["streaming", "easydata-pack-knobs", "tokenizer-kwargs", "save-destination", "checks"])
def test_settings_that_do_not_shape_the_output_keep_the_fingerprint(change) -> None:
    base = {**_BASE, "pack": {"enabled": True}} if "pack" in change else _BASE
    changed = {**base, **{k: v for k, v in change.items() if v is not None}}
    assert PipelineConfig.from_dict(changed).fingerprint() == PipelineConfig.from_dict(base).fingerprint()


@pytest.mark.parametrize("change", [
    {"seed": 7}, {"tokenize": {"max_length": 10}}, {"pack": {"enabled": True, "seq_length": 64}},
    {"save": {"num_shards": 3}}, {"datasets": [{"name": "web", "data_files": "other.jsonl"}]},
])
def test_settings_that_shape_the_output_change_the_fingerprint(change) -> None:
    assert PipelineConfig.from_dict({**_BASE, **change}).fingerprint() != PipelineConfig.from_dict(_BASE).fingerprint()


@pytest.mark.slow
def test_resume_survives_a_change_to_the_streaming_settings(tmp_path, tokenizer_dir) -> None:
    data = tmp_path / "web.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in make_texts(30, seed=2)) + "{broken\n")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "max_rejected_fraction": 0.0,
                               "datasets": [{"name": "web", "data_files": str(data)}],
                               "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1}}))

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--direct_num_workers=1", *extra],
                              capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)

    assert run().returncode != 0  # stopped after tokenizing: one record rejected, more than allowed
    resumed = run("--resume", "--set", "max_rejected_fraction=null", "--set", "streaming.window_seconds=5")
    assert resumed.returncode == 0, resumed.stderr
    assert "easydata: resuming run" in resumed.stderr and "already tokenized" in resumed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["2024", "yes", "null", "1e3"])
def test_output_is_a_path_as_written(tmp_path, tokenizer_dir, name) -> None:
    data = write_jsonl(tmp_path / "web.jsonl", ({"text": t} for t in make_texts(10, seed=1)))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir),
                               "datasets": [{"name": "web", "data_files": str(data)}]}))
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--output", name, "--quiet",
                           "--direct_num_workers=1"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / name / "manifest.json").is_file()
    assert json.loads((tmp_path / name / "manifest.json").read_text())["config"]["save"]["output_dir"] == name


# ---- a transient read error fails the step; only corrupt data is a dead letter ----------------------------


class _FlakyAfter:
    """A real file whose reads raise `error` once `lines` lines were read: a connection reset part-way."""

    def __init__(self, raw, lines: int, error: Exception):
        self._raw, self._left, self._error = raw, lines, error

    def readline(self, *args):
        if args and args[0] == 0:
            return b""
        if self._left <= 0:
            raise self._error
        self._left -= 1
        return self._raw.readline(*args)

    def __iter__(self):
        return iter(self.readline, b"")

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._raw.close()


def _flaky_open(monkeypatch, lines: int, error: Exception) -> None:
    import easydata.io.input_formats.lines as lines_module
    from easydata.io.filesystems import open_file

    monkeypatch.setattr(lines_module, "open_file", lambda path, *a, **k: _FlakyAfter(open_file(path, *a, **k), lines,
                                                                                      error))


@pytest.mark.parametrize("error", [ConnectionResetError(104, "Connection reset by peer"), TimeoutError("read timed out"),
                                   OSError(5, "Input/output error")], ids=["reset", "timeout", "eio"])
def test_a_transient_read_error_fails_the_split_instead_of_dead_lettering_its_rest(tmp_path, monkeypatch, error):
    from easydata.config import DatasetConfig
    from easydata.errors import TransientInputError
    from easydata.io.sources import plan_splits, read_split

    data = write_jsonl(tmp_path / "web.jsonl", ({"text": f"document {i}"} for i in range(1000)))
    dataset = DatasetConfig(name="web", data_files=str(data))
    (split,) = plan_splits(dataset, target_bytes=10**9)
    _flaky_open(monkeypatch, 300, error)
    rejects: list = []
    with pytest.raises(TransientInputError, match=f"reading '{data}' failed after .*{type(error).__name__}"):
        for _ in read_split(split, dataset, rejects=rejects):
            pass
    assert rejects == []  # nothing dead-lettered: the data may be fine


def test_corrupt_data_is_still_a_dead_letter(tmp_path, monkeypatch):
    from easydata.config import DatasetConfig
    from easydata.io.sources import plan_splits, read_split

    data = write_jsonl(tmp_path / "web.jsonl", ({"text": f"document {i}"} for i in range(1000)))
    dataset = DatasetConfig(name="web", data_files=str(data))
    (split,) = plan_splits(dataset, target_bytes=10**9)
    _flaky_open(monkeypatch, 300, EOFError("Compressed file ended before the end-of-stream marker was reached"))
    rejects: list = []
    documents = sum(len(b.texts) for b in read_split(split, dataset, rejects=rejects))
    assert documents == 300 and len(rejects) == 1 and "unreadable input after" in rejects[0].reason


def test_a_run_meeting_a_reset_connection_commits_nothing(tmp_path, tokenizer_dir, monkeypatch):
    """Before: 298 documents, one dead letter, exit 0: a partial dataset committed as if complete."""
    from beam_pipelines.batch import run_batch
    from easydata.errors import TransientInputError

    data = write_jsonl(tmp_path / "web.jsonl", ({"text": t} for t in make_texts(1000, seed=3)))
    config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir),
                                       "datasets": [{"name": "web", "data_files": str(data)}],
                                       "save": {"output_dir": str(tmp_path / "out")}})
    _flaky_open(monkeypatch, 300, ConnectionResetError(104, "Connection reset by peer"))
    with pytest.raises(TransientInputError, match="ConnectionResetError"):
        run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_local_run_tries_again_after_a_transient_read_error_and_commits_everything(tmp_path, tokenizer_dir,
                                                                                    monkeypatch, capsys):
    """SPEC 11: a local run retries a few times, then fails in one line; before, the first reset connection
    ended the run (the case above is the "then fails": every attempt meets the reset)."""
    import easydata.io.input_formats.lines as lines_module
    from beam_pipelines.batch import LOCAL_READ_RETRIES, run_batch
    from easydata.io.filesystems import open_file

    data = write_jsonl(tmp_path / "web.jsonl", ({"text": t} for t in make_texts(1000, seed=3)))
    config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir),
                                       "datasets": [{"name": "web", "data_files": str(data)}],
                                       "save": {"output_dir": str(tmp_path / "out")}})
    opened: list[str] = []
    reset = ConnectionResetError(104, "Connection reset by peer")

    def flaky_once(path, *args, **kwargs):  # every open is flaky until the reset has happened once
        opened.append(path)
        raw = open_file(path, *args, **kwargs)
        return raw if reset.__traceback__ is not None else _FlakyAfter(raw, 300, reset)

    monkeypatch.setattr(lines_module, "open_file", flaky_once)
    manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=True).manifest
    assert (manifest["documents_in"], manifest["documents_written"], manifest["documents_rejected"]) == (1000, 1000, 0)
    err = capsys.readouterr().err
    assert "ConnectionResetError" in err and f"Connection reset by peer; trying again as --resume (1 of {LOCAL_READ_RETRIES})" in err
    assert len(opened) >= 2


# ---- streaming counts documents, not windows of them ------------------------------------------------------


def test_a_stream_with_sliding_windows_counts_documents_not_windows(tokenizer_dir, tmp_path):
    """3 long documents cut into windows were reported as 69 documents written (one per row)."""
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from tests.test_streaming import run_test_stream

    texts = make_texts(3, seed=4, min_words=300, max_words=400)
    out = tmp_path / "out"
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "live", "pubsub_subscription": "projects/p/subscriptions/s"}],
        "tokenize": {"max_length": 32, "truncation": "window", "stride": 4},
        "streaming": {"window_seconds": 60}, "save": {"output_dir": str(out)}})
    stream = (TestStream().add_elements([TimestampedValue(PubsubMessage(json.dumps({"text": t}).encode(), {},
                                                                        message_id=f"m{i}"), i)
                                         for i, t in enumerate(texts)]).advance_watermark_to_infinity())
    manifest = run_test_stream(config, stream)
    rows = sum(s["rows"] for s in manifest["datasets"]["live"]["shards"])
    assert rows > 20  # every document is many windows
    assert (manifest["documents_in"], manifest["documents_written"], manifest["documents_rejected"]) == (3, 3, 0)


# ---- --dry-run refuses what the run refuses ---------------------------------------------------------------


def _dry_run_and_run(tmp_path: Path, body: dict) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    job = tmp_path / "job.json"
    job.write_text(json.dumps(body))
    return tuple(subprocess.run([sys.executable, "-m", "easydata", "run", str(job), "--quiet", "--direct_num_workers=1",
                                 *extra], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
                 for extra in (["--dry-run"], []))


@pytest.mark.slow
def test_dry_run_refuses_what_the_run_refuses(tmp_path, tokenizer_dir) -> None:
    data = write_jsonl(tmp_path / "web.jsonl", ({"text": t} for t in make_texts(20, seed=1)))
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                               {"role": "assistant", "content": "yo"}]}] * 5)
    no_eos = train_bpe_tokenizer_once(tmp_path / "no-eos", special_tokens=["<s>"])
    other = train_bpe_tokenizer_once(tmp_path / "other", vocab_size=300)
    out = {"save": {"output_dir": str(tmp_path / "out")}}
    cases = {
        "chat without a template": ({"default_tokenizer": str(tokenizer_dir),
                                     "datasets": [{"name": "chat", "data_files": str(chat), "content_field": "messages"}],
                                     **out}, "has no chat template and chat.template is not set"),
        "EOS the tokenizer lacks": ({"default_tokenizer": str(no_eos),
                                     "datasets": [{"name": "web", "data_files": str(data)}], **out},
                                    "declares no EOS token but tokenize.add_eos is true"),
        "a mix of vocabularies": ({"default_tokenizer": str(tokenizer_dir),
                                   "datasets": [{"name": "a", "data_files": str(data)},
                                                {"name": "b", "data_files": str(data), "tokenizer": str(other)}],
                                   "mix": {"weights": {"a": 1, "b": 1}}, **out}, "use different vocabularies"),
        "pubsub in a batch run": ({"default_tokenizer": str(tokenizer_dir),
                                   "datasets": [{"name": "live", "pubsub_subscription": "projects/p/subscriptions/s"}],
                                   **out}, "that needs the streaming pipeline"),
    }
    for name, (body, expected) in cases.items():
        dry, run = _dry_run_and_run(tmp_path, body)
        for done in (dry, run):
            assert done.returncode != 0 and expected in done.stderr, (name, done.stdout, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
        assert dry.stderr == run.stderr, name


def train_bpe_tokenizer_once(out: Path, **options) -> Path:
    from easydata.text.tokenizer_training import train_bpe_tokenizer

    return train_bpe_tokenizer(make_texts(400, seed=6), out, vocab_size=options.pop("vocab_size", 512), **options)
