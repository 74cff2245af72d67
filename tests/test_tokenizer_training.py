"""`easydata.text.tokenizer_training` and `easydata train-tokenizer`: byte-level BPE / unigram trained on data
files (streamed with the pipeline's readers), loadable by every command, then used for a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from easydata.cli import main
from easydata.errors import ConfigError, InputError, OutputError
from easydata.text.tokenizer import load_tokenizer
from easydata.text.tokenizer_training import iter_training_texts, train_tokenizer, train_tokenizer_from_files
from tests.conftest import make_texts, write_jsonl

UNSEEN = "Zebra ☃ naïve 東京 🙂 \t tabs\nand newlines"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    texts = make_texts(400, seed=31)
    write_jsonl(tmp_path / "data" / "a.jsonl", ({"text": t} for t in texts[:300]))
    write_jsonl(tmp_path / "data" / "chat.jsonl", [
        {"messages": [{"role": "user", "content": t}, {"role": "assistant", "content": t[::-1]}]}
        for t in texts[300:350]] + [{"text": ""}, {"no": "text"}])
    (tmp_path / "data" / "b.txt").write_text("\n".join(texts[350:]) + "\n", encoding="utf-8")
    return tmp_path / "data"


def test_training_texts_stream_every_input_type(corpus):
    counts: dict[str, int] = {}
    texts = list(iter_training_texts([str(corpus / "*.jsonl"), str(corpus / "*.txt")], counts=counts))
    assert counts == {"documents": 400, "rejected": 2} and len(texts) == 400
    assert any("\n" in t for t in texts)  # chat: the messages' contents, one per line
    limited: dict[str, int] = {}
    assert len(list(iter_training_texts(str(corpus / "a.jsonl"), num_rows=7, counts=limited))) == 7


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_trained_tokenizer_loads_and_round_trips(tmp_path, corpus, model):
    out = train_tokenizer(iter_training_texts(str(corpus / "*.jsonl")), tmp_path / model, vocab_size=420,
                          model=model, special_tokens=["<s>", "</s>", "<pad>", "<|im_end|>"])
    handle = load_tokenizer(str(out))
    assert (handle.bos_token_id, handle.eos_token_id, handle.pad_token_id) == (0, 1, 2)
    assert 259 < handle.info.vocab_size <= 420
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tokenizer.decode(tokenizer.encode(UNSEEN).ids) == UNSEEN  # byte level: any text, no unknown token
    assert tokenizer.encode("<|im_end|>").ids == [3]
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == ("<s>", "</s>", "<pad>")


def test_bpe_reaches_the_requested_vocabulary(tmp_path):
    out = train_tokenizer(iter(make_texts(3000, seed=5)), tmp_path / "t", vocab_size=400)
    assert Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size() == 400


def test_user_errors_are_reported_before_reading(tmp_path, corpus):
    with pytest.raises(ConfigError, match="at least 259"):
        train_tokenizer_from_files(str(tmp_path / "nothing" / "*.jsonl"), tmp_path / "t", vocab_size=10)
    with pytest.raises(InputError, match="matches no file"):
        train_tokenizer_from_files(str(tmp_path / "nothing" / "*.jsonl"), tmp_path / "t", vocab_size=300)
    with pytest.raises(InputError, match="no document to train on"):
        train_tokenizer_from_files(str(corpus / "a.jsonl"), tmp_path / "t", vocab_size=300, content_field="body")
    train_tokenizer_from_files(str(corpus / "a.jsonl"), tmp_path / "t", vocab_size=300)
    with pytest.raises(OutputError, match="already holds a tokenizer.s files \\(tokenizer.json"):
        train_tokenizer_from_files(str(corpus / "a.jsonl"), tmp_path / "t", vocab_size=300)
    train_tokenizer_from_files(str(corpus / "a.jsonl"), tmp_path / "t", vocab_size=300, overwrite=True)


@pytest.mark.slow
def test_cli_trains_a_tokenizer_then_a_full_run_uses_it(tmp_path, corpus, capsys):
    assert main(["train-tokenizer", "--data-files", str(corpus / "*.jsonl"), "--data-files", str(corpus / "b.txt"),
                 "--vocab-size", "450", "--output", str(tmp_path / "tok")]) == 0
    assert "trained on 400 documents (2 records rejected)" in capsys.readouterr().out
    assert main(["tokenize", "--data-files", str(corpus / "a.jsonl"), "--tokenizer", str(tmp_path / "tok"),
                 "--output", str(tmp_path / "out"), "--num-shards", "2", "--quiet", "--direct_num_workers=1"]) == 0
    assert main(["validate", str(tmp_path / "out")]) == 0
    ids = sorted(row for shard in sorted((tmp_path / "out" / "data").glob("*.parquet"))
                 for row in pq.read_table(shard).column("input_ids").to_pylist())
    tokenizer = Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    texts = [json.loads(line)["text"] for line in (corpus / "a.jsonl").read_text().splitlines()]
    assert ids == sorted(e.ids + [1] for e in tokenizer.encode_batch(texts))  # + EOS (id 1)


@pytest.mark.parametrize("args, message", [
    (["--vocab-size", "100"], "at least 259"),
    (["--special-tokens", "<s>,<s>"], "special tokens must be distinct"),
    # it said "no document to train on ... check --content-field / --type"
    (["--num-rows", "0"], "`num_rows` must be a positive number of documents, got 0"),
])
def test_cli_errors_are_one_line(tmp_path, corpus, capsys, args, message):
    code = main(["train-tokenizer", "--data-files", str(corpus / "a.jsonl"), "--vocab-size", "300",
                 "--output", str(tmp_path / "tok"), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("easydata: error: ") and len(err.splitlines()) == 1 and message in err


def test_an_output_that_cannot_be_made_is_one_line_before_training(tmp_path, corpus, capsys):
    """A file in the output's path ended in a `NotADirectoryError` traceback, and only after the training (hours
    on a large corpus); a training that fails leaves no empty output folder behind."""
    (tmp_path / "file").write_text("x")
    code = main(["train-tokenizer", "--data-files", str(corpus / "a.jsonl"), "--vocab-size", "300",
                 "--output", str(tmp_path / "file" / "tok")])
    assert code == 2 and capsys.readouterr().err.strip() == \
        f"easydata: error: cannot write the tokenizer to '{tmp_path / 'file' / 'tok'}': Not a directory"
    (tmp_path / "empty.jsonl").write_text("")
    code = main(["train-tokenizer", "--data-files", str(tmp_path / "empty.jsonl"), "--vocab-size", "300",
                 "--output", str(tmp_path / "new" / "tok")])
    assert code == 2 and "no document to train on" in capsys.readouterr().err
    assert not (tmp_path / "new" / "tok").exists()


@pytest.mark.parametrize("command", ["train-tokenizer", "stats"])
def test_new_commands_have_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0 and command in capsys.readouterr().out


def test_reading_progress_covers_the_bytes_reading_counts(tmp_path, capsys):
    """`train-tokenizer` showed nothing while it read a corpus (a 10 GB one reads for many minutes); its progress
    is over the bytes reading counts, a compressed file's decompressed ones (its file size ended the bar early)."""
    import gzip

    from easydata.figures import size
    from easydata.run.progress import CountProgress

    texts = make_texts(400, seed=3)
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in texts[:200]))
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[200:])
    counts: dict = {}
    seen: list = []
    taken = list(iter_training_texts(str(tmp_path / "*.jsonl*"), counts=counts,
                                     on_batch=lambda nbytes, documents: seen.append((nbytes, documents))))
    assert len(taken) == 400 and sum(d for _, d in seen) == 400
    assert counts["input_bytes_total"] == sum(b for b, _ in seen) == \
        (tmp_path / "a.jsonl").stat().st_size + len(gzip.decompress((tmp_path / "b.jsonl.gz").read_bytes()))
    progress = CountProgress(counts["input_bytes_total"], "reading", log_every=0)
    for nbytes, documents in seen:
        progress.update(nbytes, documents)
    progress.stage("learning")
    lines = capsys.readouterr().err.splitlines()
    assert lines[-2].startswith(f"[easydata] reading: 100.0% of {size(counts['input_bytes_total'])}, 400 documents, ")
    assert lines[-1].startswith("[easydata] learning (400 documents read in ")
    assert main(["train-tokenizer", "--data-files", str(tmp_path / "a.jsonl"), "--vocab-size", "300", "--output",
                 str(tmp_path / "tok")]) == 0
    assert "[easydata] learning a vocabulary of 300 from the documents read (200 documents read in" in \
        capsys.readouterr().err
    assert main(["train-tokenizer", "--data-files", str(tmp_path / "a.jsonl"), "--vocab-size", "300", "--output",
                 str(tmp_path / "tok"), "--overwrite", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
