"""Runs that wrote nothing must not look successful (one clear line, nothing committed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easydata.cli import main
from easydata.tools.validate import validate_output
from tests.conftest import make_texts, write_jsonl

pytestmark = pytest.mark.slow


def _job(tmp_path: Path, tokenizer_dir: Path, **extra) -> Path:
    write_jsonl(tmp_path / "in" / "web.jsonl", ({"text": t} for t in make_texts(30)))
    write_jsonl(tmp_path / "in" / "code.jsonl", ({"text": ""} for _ in range(12)))  # every record empty
    config = {"default_tokenizer": str(tokenizer_dir),
              "datasets": [{"name": "web", "data_files": str(tmp_path / "in" / "web.jsonl")},
                           {"name": "code", "data_files": str(tmp_path / "in" / "code.jsonl")}],
              "save": {"output_dir": str(tmp_path / "out"), "num_shards": 1}, **extra}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    return path


def test_a_dataset_whose_records_were_all_rejected_fails_the_run(tmp_path, tokenizer_dir, capsys):
    """Such a run used to exit 0, print "wrote ...", and validate OK."""
    assert main(["run", str(_job(tmp_path, tokenizer_dir)), "--quiet", "--direct_num_workers=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("easydata: error: dataset 'code' wrote no documents: all 12 records were rejected, 12 of"
                          " them for: empty text (dead letters in ")
    assert "set allow_empty_datasets: true to accept)" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_allow_empty_datasets_commits_and_validate_warns(tmp_path, tokenizer_dir, capsys):
    job = _job(tmp_path, tokenizer_dir, allow_empty_datasets=True)
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1"]) == 0
    report = validate_output(str(tmp_path / "out"))
    assert report.ok and report.warnings == ["dataset 'code' holds no documents (12 rejected)"]


def test_chat_records_without_any_template_fail_before_reading(tmp_path, tokenizer_dir, capsys):
    """The reason used to be only in rejected/*.jsonl, after a run that exited 0."""
    write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                        {"role": "assistant", "content": "hello"}]}] * 5)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir),
                               "datasets": [{"name": "sft", "data_files": str(tmp_path / "chat.jsonl"),
                                             "content_field": "messages"}],
                               "save": {"output_dir": str(tmp_path / "out")}}))
    assert main(["run", str(job), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"easydata: error: invalid config: dataset 'sft' reads chat records (content_field 'messages') but tokenizer"
                   f" '{tokenizer_dir}' has no chat template and chat.template is not set: set chat.template (jinja"
                   " text or a file)")
    assert not (tmp_path / "out").exists()  # nothing was started, not even the output directory


@pytest.mark.parametrize("lines", [[], ["", "   "]])
def test_a_dataset_with_no_records_fails_the_run(tmp_path, tokenizer_dir, capsys, lines):
    (tmp_path / "empty.jsonl").write_text("\n".join(lines))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir),
                               "datasets": [{"name": "none", "data_files": str(tmp_path / "empty.jsonl")}],
                               "save": {"output_dir": str(tmp_path / "out")}}))
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        "easydata: error: dataset 'none' wrote no documents: its input holds no records; set allow_empty_datasets:"
        " true to accept an empty dataset")


@pytest.mark.parametrize("suffix", ["jsonl", "parquet", "arrow"])
def test_a_wrong_content_field_is_refused_at_planning_naming_the_fields(tmp_path, tokenizer_dir, capsys, suffix):
    """Before: found only after reading all the data (18 s on 17 MB), and `--dry-run` said nothing. A table's
    records hold only the columns read, so its message named no field: it names the table's columns."""
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    records = [{"body": t, "path": "a.py"} for t in make_texts(80, seed=2)]
    path = tmp_path / "in" / f"code.{suffix}"
    write_jsonl(tmp_path / "in" / "code.jsonl", records)
    if suffix != "jsonl":
        (tmp_path / "in" / "code.jsonl").unlink()
        (pq.write_table if suffix == "parquet" else feather.write_feather)(pa.Table.from_pylist(records), path)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": str(tmp_path / "out")},
                               "datasets": [{"name": "code", "data_files": str(path)}]}))
    expected = ("easydata: error: invalid config: dataset 'code': none of {} records sampled across its input has"
                " content_field 'text' (their fields: body, path); set the dataset's content_field")
    for extra in ([], ["--dry-run"]):
        assert main(["run", str(job), "--quiet", *extra]) == 2
        assert capsys.readouterr().err.strip() == expected.format(48 if suffix == "jsonl" else 50)  # by bytes, rows
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_a_dotted_content_field_says_it_names_a_top_level_field(tmp_path, tokenizer_dir, capsys, suffix):
    """`content_field: document.text` over records that keep the text inside `document` (hostile round 9): the
    error said only to set the content field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [{"document": {"text": t, "lang": "en"}, "id": i} for i, t in enumerate(make_texts(20, seed=3))]
    path = tmp_path / f"nested.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, records)
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": str(tmp_path / "out")},
                               "datasets": [{"name": "n", "data_files": str(path), "content_field": "document.text"}]}))
    assert main(["run", str(job), "--quiet", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "content_field 'document.text' (their fields: document, id): content_field names a top-level field, and"
        " 'document.text' looks like one inside 'document'; lift it out with a format_callback")


def test_a_csv_separated_by_semicolons_says_so(tmp_path, tokenizer_dir, capsys):
    """Excel writes CSV separated by ';' in many locales: its header was read as one field 'id;text', and the error
    said only to set the content field (hostile round 9)."""
    path = tmp_path / "excel.csv"
    path.write_text("id;text\n" + "".join(f"{i};{t}\n" for i, t in enumerate(make_texts(20, seed=4))))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"default_tokenizer": str(tokenizer_dir), "save": {"output_dir": str(tmp_path / "out")},
                               "datasets": [{"name": "e", "data_files": str(path)}]}))
    assert main(["run", str(job), "--quiet", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "content_field 'text' (their fields: id;text): the header is one field holding ';': CSV is read separated"
        " by ',' (.tsv by tabs); convert the file, or read it with a format_callback")
