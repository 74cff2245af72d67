"""Tests for `easydata.run.manifest`: totals are the sums of the shards and datasets, every field SPEC §7
requires is present, the manifest round-trips through local disks and fsspec URLs, and an unreadable,
foreign or too-new manifest is refused with a message that says what to do."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from easydata.errors import ValidationFailed
from easydata.io.filesystems import get_fs, join
from easydata.run.manifest import FORMAT_VERSION, MANIFEST_NAME, build_manifest, read_manifest, write_manifest

TOKENIZER = {"name_or_path": "tok", "content_hash": "sha256:ab", "vocab_size": 32000, "bos_token_id": 1,
             "eos_token_id": 2, "pad_token_id": None}
SCHEMA = {"columns": {"input_ids": "list<item: int32>", "attention_mask": "list<item: int32>"},
          "token_columns": ["input_ids", "attention_mask"], "packed": False, "seq_length": None}
DATASETS = {
    "web": {"shards": [{"path": "web/part-00000-of-00002.parquet", "rows": 10, "tokens": 300},
                       {"path": "web/part-00001-of-00002.parquet", "rows": 9, "tokens": 250}],
            "documents_in": 21, "documents_written": 19, "documents_rejected": 2, "padding_tokens": 0},
    "code": {"shards": [{"path": "code/part-00000-of-00001.parquet", "rows": 4, "tokens": 1000}],
             "documents_in": 4, "documents_written": 4, "documents_rejected": 0},  # no padding_tokens: 0
    "empty": {"shards": [], "documents_in": 3, "documents_written": 0, "documents_rejected": 3,
              "padding_tokens": 0},
}


def make_manifest(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(config={"seed": 42, "save": {"format": "parquet"}}, fingerprint="sha256:cfg",
                                  tokenizer=TOKENIZER, schema=SCHEMA, datasets=DATASETS, output_format="parquet",
                                  compression="zstd")
    kwargs.update(overrides)
    return build_manifest(**kwargs)


# ---- build_manifest ------------------------------------------------------------------------------


def test_totals_and_per_dataset_sums() -> None:
    manifest = make_manifest()
    assert manifest["totals"] == {"rows": 23, "tokens": 1550, "padding_tokens": 0, "documents_in": 28,
                                  "documents_written": 23, "documents_rejected": 5, "shards": 3}
    assert list(manifest["datasets"]) == ["code", "empty", "web"]  # sorted by name
    assert manifest["datasets"]["web"] == {
        "shards": DATASETS["web"]["shards"], "rows": 19, "tokens": 550, "padding_tokens": 0,
        "documents_in": 21, "documents_written": 19, "documents_rejected": 2}
    assert manifest["datasets"]["code"]["padding_tokens"] == 0
    assert manifest["datasets"]["empty"] == {"shards": [], "rows": 0, "tokens": 0, "padding_tokens": 0,
                                             "documents_in": 3, "documents_written": 0, "documents_rejected": 3}
    assert (manifest["documents_in"], manifest["documents_written"], manifest["documents_rejected"]) == (28, 23, 5)
    assert manifest["documents_in"] == manifest["documents_written"] + manifest["documents_rejected"]


def test_padding_tokens_are_summed() -> None:
    datasets = {"mixed": {"shards": [{"path": "mixed/p0", "rows": 2, "tokens": 16}], "documents_in": 5,
                          "documents_written": 5, "documents_rejected": 0, "padding_tokens": 3},
                "other": {"shards": [{"path": "other/p0", "rows": 1, "tokens": 8}], "documents_in": 1,
                          "documents_written": 1, "documents_rejected": 0, "padding_tokens": 4}}
    manifest = make_manifest(datasets=datasets)
    assert manifest["totals"]["padding_tokens"] == 7
    assert manifest["datasets"]["mixed"]["padding_tokens"] == 3


def test_no_datasets_gives_zero_totals() -> None:
    assert make_manifest(datasets={})["totals"] == {"rows": 0, "tokens": 0, "padding_tokens": 0, "documents_in": 0,
                                                    "documents_written": 0, "documents_rejected": 0, "shards": 0}


def test_fields_required_by_the_spec() -> None:
    manifest = make_manifest(rejected_files=["rejected/b.jsonl", "rejected/a.jsonl"])
    for key in ("format_version", "created_at", "config", "tokenizer", "schema", "datasets", "totals",
                "documents_in", "documents_written", "documents_rejected"):
        assert key in manifest, key
    assert manifest["format_version"] == FORMAT_VERSION == 1
    created = dt.datetime.fromisoformat(manifest["created_at"])
    assert created.utcoffset() == dt.timedelta(0)
    assert abs((dt.datetime.now(dt.timezone.utc) - created).total_seconds()) < 60
    assert manifest["config"] == {"seed": 42, "save": {"format": "parquet"}}
    assert manifest["config_fingerprint"] == "sha256:cfg"
    for key in ("name_or_path", "content_hash", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert manifest["tokenizer"][key] == TOKENIZER[key]
    for key in ("columns", "packed", "seq_length"):
        assert key in manifest["schema"]
    for info in manifest["datasets"].values():
        for shard in info["shards"]:
            assert set(shard) >= {"path", "rows", "tokens"}
    assert set(manifest["totals"]) >= {"rows", "tokens", "padding_tokens"}
    assert (manifest["format"], manifest["compression"]) == ("parquet", "zstd")
    assert manifest["rejected_files"] == ["rejected/a.jsonl", "rejected/b.jsonl"]
    assert "run" not in manifest and "tokenizers" not in manifest


def test_optional_run_and_per_dataset_tokenizers() -> None:
    run = {"run_id": "0123456789ab", "elapsed_seconds": 1.5}
    per_dataset = {"web": TOKENIZER, "code": TOKENIZER}
    manifest = make_manifest(run=run, tokenizers=per_dataset)
    assert manifest["run"] == run
    assert manifest["tokenizers"] == per_dataset


# ---- write / read --------------------------------------------------------------------------------


@pytest.fixture(params=["local", "memory"])
def output_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An existing, empty output directory on a local disk or in `memory://`."""
    if request.param == "local":
        url = str(tmp_path / "out")
    else:
        request.getfixturevalue("memory_fs")
        url = "memory://out"
    fs, root = get_fs(url)
    fs.makedirs(root, exist_ok=True)
    return url


def put_manifest_text(url: str, text: str) -> None:
    fs, root = get_fs(url)
    fs.pipe_file(join(root, MANIFEST_NAME), text.encode())


def test_write_read_round_trip(output_url: str) -> None:
    manifest = make_manifest(run={"run_id": "r"})
    path = write_manifest(output_url, manifest)
    assert path == join(output_url, "manifest.json")
    assert read_manifest(output_url) == manifest
    fs, root = get_fs(output_url)
    # Written through a temporary name that does not survive; the file is plain indented JSON.
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] == ["manifest.json"]
    text = fs.cat_file(join(root, MANIFEST_NAME)).decode()
    assert json.loads(text) == manifest
    assert text.startswith('{\n  "format_version": 1,') and text.endswith("}\n")


def test_write_replaces_an_existing_manifest(output_url: str) -> None:
    write_manifest(output_url, make_manifest(fingerprint="first"))
    write_manifest(output_url, make_manifest(fingerprint="second"))
    assert read_manifest(output_url)["config_fingerprint"] == "second"


def test_read_accepts_older_format_versions(output_url: str) -> None:
    put_manifest_text(output_url, '{"format_version": 0, "datasets": {}}')
    assert read_manifest(output_url) == {"format_version": 0, "datasets": {}}


def test_missing_manifest(output_url: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        read_manifest(output_url)
    assert str(info.value) == (f"'{output_url}' has no manifest.json: not an easydata output, or a run that"
                               " did not finish")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed, match="has no manifest.json"):
        read_manifest(str(tmp_path / "never-created"))


@pytest.mark.parametrize("text", ['{"format_version": 1, "datasets": ', "", "\x00\x01binary", "{'a': 1}"],
                         ids=["truncated", "empty", "binary", "python-repr"])
def test_corrupt_json(output_url: str, text: str) -> None:
    put_manifest_text(output_url, text)
    with pytest.raises(ValidationFailed) as info:
        read_manifest(output_url)
    assert str(info.value).startswith(f"'{join(output_url, 'manifest.json')}' is not a readable JSON manifest: ")


@pytest.mark.parametrize("text", ['{"datasets": {}}', "[1, 2]", '"manifest"', "null"])
def test_json_without_format_version(output_url: str, text: str) -> None:
    put_manifest_text(output_url, text)
    with pytest.raises(ValidationFailed) as info:
        read_manifest(output_url)
    assert str(info.value) == f"'{join(output_url, 'manifest.json')}' is not an easydata manifest (no format_version)"


@pytest.mark.parametrize("version", ['"1"', "null", "1.5", "true", "[1]"])
def test_invalid_format_version(output_url: str, version: str) -> None:
    put_manifest_text(output_url, f'{{"format_version": {version}}}')
    with pytest.raises(ValidationFailed) as info:
        read_manifest(output_url)
    assert str(info.value) == (f"'{join(output_url, 'manifest.json')}' has an invalid format_version"
                               f" {json.loads(version)!r}")


def test_newer_format_version_asks_to_upgrade(output_url: str) -> None:
    put_manifest_text(output_url, json.dumps({**make_manifest(), "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ValidationFailed) as info:
        read_manifest(output_url)
    assert str(info.value) == (f"'{join(output_url, 'manifest.json')}' has format_version 2; this easydata"
                               " reads up to 1: upgrade easydata-beam")


# ---- the Manifest model ---------------------------------------------------------------------------------


def test_the_model_gives_typed_outputs_and_round_trips_its_json() -> None:
    from easydata.run.manifest import Manifest

    manifest = Manifest.from_json(json.loads(json.dumps(make_manifest())))
    assert manifest.to_json() == make_manifest().to_json() | {"created_at": manifest["created_at"]}
    web = manifest.outputs["web"]
    assert [s.path for s in web.shards] == ["web/part-00000-of-00002.parquet", "web/part-00001-of-00002.parquet"]
    assert (web.rows, web.tokens, web.documents_in, web.documents_written, web.documents_rejected) == (19, 550, 21, 19, 2)
    assert manifest.output("code")[1].shards[0].rows == 4 and manifest.format == "parquet" and not manifest.packed
    assert manifest.fingerprint == "sha256:cfg" and set(manifest.columns) == {"input_ids", "attention_mask"}
    with pytest.raises(ValueError, match=r"holds datasets \['code', 'empty', 'web'\]: pass name= to choose one"):
        manifest.output()
    with pytest.raises(ValueError, match="has no dataset 'books'"):
        manifest.output("books")


@pytest.mark.parametrize("change, message", [
    ({"format_version": FORMAT_VERSION + 1}, "upgrade easydata-beam"),
    ({"format_version": "1"}, "invalid format_version"),
    ({"documents_in": "many"}, "manifest documents_in is \"many\", not a count"),
])
def test_the_model_refuses_what_it_cannot_read(change, message) -> None:
    from easydata.run.manifest import Manifest

    with pytest.raises(ValidationFailed, match=message):
        Manifest.from_json({**make_manifest(), **change})
