"""Hub ids like every Hugging Face tool: tokenizers, `type: huggingface` datasets and `hf://` paths
from a real cache layout with HF_HUB_OFFLINE=1 (no network in tests), one-line errors, and
`push_to_hub` up to the call with the network refused."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from easydata.errors import InputError, OutputError
from easydata.io.hub import _split_files, resolve_hub_dataset
from tests.conftest import free_port, make_texts, write_jsonl
from tests.easydata_docs import _snapshot

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def hub_cache(tmp_path, mistral_tokenizer_dir, monkeypatch) -> Path:
    cache = tmp_path / "hf-cache"
    _snapshot(cache, "model", "acme/tok", {
        "tokenizer.json": (mistral_tokenizer_dir / "tokenizer.json").read_bytes(),
        "tokenizer_config.json": (mistral_tokenizer_dir / "tokenizer_config.json").read_bytes()})
    table = io.BytesIO()
    pq.write_table(pa.table({"text": make_texts(40, seed=1)}), table)
    _snapshot(cache, "dataset", "acme/web", {
        "data/train-00000-of-00001.parquet": table.getvalue(),
        "data/test-00000-of-00001.parquet": table.getvalue(),
    })
    readme = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: texts/main_*.jsonl\n" \
             "  - split: validation\n    path: texts/held_out.jsonl\n---\n# a card\n"
    lines = "".join(json.dumps({"text": t}) + "\n" for t in make_texts(10, seed=2)).encode()
    _snapshot(cache, "dataset", "acme/carded", {"README.md": readme.encode(), "texts/main_0.jsonl": lines,
                                               "texts/main_1.jsonl": lines, "texts/held_out.jsonl": lines})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easydata", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_split_files_follow_the_datasets_conventions() -> None:
    files = ["README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
             "data/validation-00000-of-00001.parquet", "test.jsonl", ".gitattributes"]
    assert _split_files(files, "train") == files[1:3]
    assert _split_files(files, "validation") == ["data/validation-00000-of-00001.parquet"]
    assert _split_files(files, "test") == ["test.jsonl"]
    assert _split_files(["a.jsonl", "b.jsonl"], "train") == ["a.jsonl", "b.jsonl"]  # no split named: all train


def test_hub_dataset_split_files_from_the_cache(hub_cache) -> None:
    assert [Path(p).name for p in resolve_hub_dataset("acme/web", "test")] == ["test-00000-of-00001.parquet"]
    assert [Path(p).name for p in resolve_hub_dataset("acme/carded")] == ["main_0.jsonl", "main_1.jsonl"]  # the card
    assert [Path(p).name for p in resolve_hub_dataset("acme/carded", "validation")] == ["held_out.jsonl"]
    with pytest.raises(InputError, match="^dataset 'acme/missing' is not in the Hugging Face cache and HF_HUB_OFFLINE=1"):
        resolve_hub_dataset("acme/missing")
    with pytest.raises(InputError, match="no data files for split 'nope'"):
        resolve_hub_dataset("acme/web", "nope")


@pytest.mark.slow
def test_cli_run_with_hub_tokenizer_hub_dataset_and_hf_paths_offline(hub_cache, tmp_path) -> None:
    config = {
        "default_tokenizer": "acme/tok",
        "datasets": [{"name": "web", "type": "huggingface", "data_files": "acme/web", "split": "train"},
                     {"name": "files", "data_files": "hf://datasets/acme/carded/texts/main_*.jsonl"}],
        "save": {"output_dir": str(tmp_path / "out")},
    }
    (tmp_path / "job.yaml").write_text(json.dumps(config))
    done = _cli("run", "job.yaml", "--quiet", "--direct_num_workers=1", env={}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["datasets"]["web"]["documents_written"] == 40
    assert manifest["datasets"]["files"]["documents_written"] == 20
    assert manifest["tokenizer"]["name_or_path"] == "acme/tok" and manifest["tokenizer"]["vocab_size"] == 32000


@pytest.mark.slow
def test_missing_hub_tokenizer_offline_is_one_line(hub_cache, tmp_path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"text": "hello"}])
    done = _cli("tokenize", "--data-files", "a.jsonl", "--tokenizer", "acme/absent", "--output", "out", env={},
                cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "easydata: error: tokenizer 'acme/absent' is not in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids"
        " downloading it"]


@pytest.mark.slow
def test_push_to_hub_with_the_network_refused_is_one_line(tmp_path, tokenizer_dir) -> None:
    """Up to the upload call: `create_repo` reaches a closed port and the run ends in one line."""
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(10)))
    script = (
        "from easydata import *\n"
        f"config = PipelineConfig(datasets=[DatasetConfig(data_files={str(tmp_path / 'a.jsonl')!r})],"
        f" default_tokenizer={str(tokenizer_dir)!r})\n"
        f"Pipeline(config, beam_args=['--direct_num_workers=1']).source().tokenize().save(SaveStageConfig("
        f"output_dir={str(tmp_path / 'out')!r}, push_to_hub=True, hub_repo_id='me/data', hub_token='hf_x'))\n")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{free_port()}", PYTHONPATH=str(ROOT), HF_HUB_ETAG_TIMEOUT="2")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("easydata.errors.OutputError: push_to_hub: cannot reach the Hugging Face Hub for dataset"
                           " repo 'me/data'"), done.stderr
    assert (tmp_path / "out" / "manifest.json").exists()  # the output itself was committed first


def test_push_output_offline_is_one_line(tmp_path, monkeypatch) -> None:
    from easydata.io.hub import push_output

    with pytest.raises(OutputError, match="^push_to_hub: .*HF_HUB_OFFLINE=1"):
        push_output(str(tmp_path), "me/data")


def test_remote_jobs_ship_hub_tokenizers_to_their_workers(hub_cache, tmp_path, memory_fs) -> None:
    """A job whose output is remote (Dataflow) copies a hub tokenizer into its staging directory once;
    workers load it from there, not from the Hub (here: not even from the cache)."""
    from easydata.config import PipelineConfig
    from easydata.run.run_plan import prepare_run
    from easydata.text.tokenizer import load_tokenizer

    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(5)))
    config = PipelineConfig.from_dict({"default_tokenizer": "acme/tok", "save": {"output_dir": "memory://job/out"},
                                       "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl")}]})
    plan = prepare_run(config)
    shipped = plan.datasets[0].tokenizer.name_or_path
    assert shipped.startswith("memory://job/out/.easydata-tmp-") and shipped.endswith("/tokenizers/acme/tok")
    assert plan.datasets[0].tokenizer_info.name_or_path == "acme/tok"  # the manifest names the hub id
    os.environ["HF_HUB_CACHE"] = str(tmp_path / "empty-cache")  # a worker without the launcher's cache
    worker = load_tokenizer(plan.datasets[0].tokenizer)
    assert worker.info.content_hash == plan.datasets[0].tokenizer_info.content_hash


@pytest.mark.slow
def test_a_tokenizer_path_with_a_typo_is_one_line_at_once_not_a_hub_lookup(tmp_path, tokenizer_dir) -> None:
    """Before: `tok/mistral-7b` (where `tok/` exists) was looked up on the Hub: 30 s of retries, 36 lines."""
    write_jsonl(tmp_path / "a.jsonl", [{"text": "hello"}])
    (tmp_path / "tok").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{free_port()}", HF_HUB_OFFLINE="0")  # asked, the Hub would refuse
    for spec, where in [("tok/mistral-7b", " ('tok' exists, but holds no 'mistral-7b')"), ("./nope", ""),
                        ("~/no-such-tokenizer-dir", f" ('{Path.home()}' exists, but holds no 'no-such-tokenizer-dir')"),
                        ("missing/tokenizer.json", "")]:
        done = _cli("tokenize", "--data-files", "a.jsonl", "--tokenizer", spec, "--output", "out", env=env, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            f"easydata: error: tokenizer '{spec}': no such file or directory{where}; a path must name a directory with"
            " tokenizer.json or the file itself"], done.stderr


@pytest.mark.slow
def test_a_hub_tokenizer_with_the_network_down_is_one_line_without_retries(tmp_path) -> None:
    """Before: huggingface_hub's five retries (a line each, about 25 s) before the one-line error."""
    write_jsonl(tmp_path / "a.jsonl", [{"text": "hello"}])
    port = free_port()  # nothing listens: the connection is refused at once
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(tmp_path / "empty-cache"), HF_HUB_OFFLINE="0")
    done = _cli("tokenize", "--data-files", "a.jsonl", "--tokenizer", "acme/not-cached", "--output", "out", env=env,
                cwd=tmp_path)
    assert done.returncode == 2 and "Retrying" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"easydata: error: tokenizer 'acme/not-cached' is not in the Hugging Face cache and the Hub cannot be reached"
        f" (127.0.0.1:{port}: Connection refused); check the network, or set HF_HUB_OFFLINE=1 to use only the cache"]



def test_a_gated_or_private_repo_is_told_by_the_hubs_status_not_by_the_message_text():
    """The old rule read '401' or '403' anywhere in the error's text (a repo named `model-403` was 'gated')."""
    import types

    from easydata.io.hub import _why

    class HubError(OSError):  # what huggingface_hub raises: an error carrying the HTTP response
        def __init__(self, status: int, message: str):
            super().__init__(message)
            self.response = types.SimpleNamespace(status_code=status)

    assert "is gated or private" in _why(HubError(401, "Unauthorized"), "'m'")
    assert "is gated or private" in _why(HubError(403, "Forbidden"), "'m'")
    assert "is gated or private" not in _why(HubError(500, "repo owner/model-403 failed"), "'m'")
