"""Hostile round 12: tokenizers as `transformers` and the Hub save them.

A `tokenizer.json` that keeps `truncation` / `padding` (saved after a call that asked for them, as
sentence-transformers' tokenizers ship), chat templates in `chat_template.jinja` and
`additional_chat_templates/` (what `transformers` 5 writes), a `chat_template` list of named templates
(Command R, Hermes 2 Pro), a cache that holds `tokenizer.json` alone, special tokens declared `null` or absent
from the vocabulary. Each is checked against what `transformers` itself makes of the same files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easydata.config import PipelineConfig
from easydata.errors import ConfigError
from easydata.text.chat import ChatRenderer, conversation_from_record
from easydata.text.chat_templates import named_template
from easydata.text.tokenizer import load_tokenizer, resolve_tokenizer_files, stage_tokenizer_files
from tests.conftest import make_texts, write_jsonl
from tests.easydata_docs import _snapshot

ROOT = Path(__file__).resolve().parents[1]
transformers = pytest.importorskip("transformers")

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Adds two numbers.",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                                                           "b": {"type": "number"}}}}}]
MESSAGES = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "It is 4."}]


def _copy(source: Path, target: Path, *, tokenizer: dict | None = None, config: dict | None = None) -> Path:
    """`source`'s tokenizer files in `target`, with `tokenizer.json` / `tokenizer_config.json` keys replaced."""
    target.mkdir(parents=True)
    content = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    (target / "tokenizer.json").write_text(json.dumps({**content, **(tokenizer or {})}), encoding="utf-8")
    settings = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    (target / "tokenizer_config.json").write_text(json.dumps({**settings, **(config or {})}), encoding="utf-8")
    return target


#: What `tokenizer.save_pretrained` keeps after `tokenizer(..., truncation=True, max_length=8, padding=...)`.
LENGTH_SETTINGS = {
    "truncation": {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0},
    "padding": {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 151643,
                "pad_type_id": 0, "pad_token": "<|endoftext|>"}}


def _auto(path: Path):
    return transformers.AutoTokenizer.from_pretrained(str(path))


def test_length_settings_kept_in_tokenizer_json_do_not_cut_or_pad_documents(qwen3_tokenizer_dir, tmp_path):
    # Every document came out as its first 8 tokens and 56 pad ids (attention mask 1), and no engine agreed
    # with `hf` about it, so the run fell back to `hf`. `transformers` ignores both unless a call asks.
    saved = _copy(qwen3_tokenizer_dir, tmp_path / "saved", tokenizer=LENGTH_SETTINGS)
    original = (saved / "tokenizer.json").read_bytes()
    texts = make_texts(20, seed=3, min_words=30, max_words=60)
    plain, handle = load_tokenizer(str(qwen3_tokenizer_dir)), load_tokenizer(str(saved))
    expected = [e.ids for e in plain.tokenizer.encode_batch(texts)]
    assert [len(ids) for ids in expected] != [64] * len(texts)
    assert [e.ids for e in handle.tokenizer.encode_batch(texts)] == expected
    assert _auto(saved)(texts)["input_ids"] == expected  # the reference: transformers' own reading
    for name in ("fastokens", "gigatoken"):
        flat, lengths = handle.engine(name).encode(texts, True)
        assert lengths.tolist() == [len(ids) for ids in expected]
        assert flat.tolist() == [i for ids in expected for i in ids]
    copy = json.loads(handle.tokenizer_file.read_text(encoding="utf-8"))  # what every engine reads
    assert copy["truncation"] is None and copy["padding"] is None and handle.tokenizer_file != saved / "tokenizer.json"
    assert (saved / "tokenizer.json").read_bytes() == original  # the user's file is not rewritten


def _run(tmp_path: Path, tokenizer: Path, data: Path, out: str, **settings) -> subprocess.CompletedProcess:
    job = {"default_tokenizer": str(tokenizer), "datasets": [{"name": "d", "data_files": str(data)}],
           "pack": {"enabled": False}, "save": {"output_dir": str(tmp_path / out)}, **settings}
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "easydata", "run", str(path), "--quiet"], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _shards(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.slow
def test_a_run_with_length_settings_in_tokenizer_json_writes_the_whole_documents(qwen3_tokenizer_dir, tmp_path):
    saved = _copy(qwen3_tokenizer_dir, tmp_path / "saved", tokenizer=LENGTH_SETTINGS)
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in make_texts(60, seed=4, min_words=30)])
    for tokenizer, out in ((qwen3_tokenizer_dir, "out-plain"), (saved, "out-saved")):
        done = _run(tmp_path, tokenizer, data, out)
        assert done.returncode == 0, done.stderr
    assert _shards(tmp_path / "out-saved") == _shards(tmp_path / "out-plain") != {}
    manifest = json.loads((tmp_path / "out-saved" / "manifest.json").read_text())
    assert manifest["tokenizer_engines"]["d"]["name"] == "fastokens"  # verified equal: no fall back to hf


def _chat_records(n: int) -> list[dict]:
    texts = make_texts(2 * n, seed=5, min_words=5, max_words=30)
    return [{"messages": [{"role": "user", "content": texts[2 * i]}, {"role": "assistant", "content": texts[2 * i + 1]}]}
            for i in range(n)]


@pytest.mark.slow
def test_a_tokenizer_saved_by_transformers_keeps_its_chat_template(qwen3_tokenizer_dir, tmp_path):
    # transformers 5 writes the template to chat_template.jinja and drops it from tokenizer_config.json: the
    # run said "tokenizer ... has no chat template" for the tokenizer of every model fine-tuned and saved since.
    saved = tmp_path / "saved"
    _auto(qwen3_tokenizer_dir).save_pretrained(str(saved))
    assert (saved / "chat_template.jinja").is_file()
    assert "chat_template" not in json.loads((saved / "tokenizer_config.json").read_text())
    template = json.loads((qwen3_tokenizer_dir / "tokenizer_config.json").read_text())["chat_template"]
    assert load_tokenizer(str(saved)).info.chat_template == template
    data = write_jsonl(tmp_path / "chat.jsonl", _chat_records(30))
    settings = {"datasets": [{"name": "d", "data_files": str(data), "content_field": "messages"}]}
    for tokenizer, out in ((qwen3_tokenizer_dir, "out-plain"), (saved, "out-saved")):
        done = _run(tmp_path, tokenizer, data, out, **settings)
        assert done.returncode == 0, done.stderr
    assert _shards(tmp_path / "out-saved") == _shards(tmp_path / "out-plain") != {}
    hashes = [json.loads((tmp_path / out / "manifest.json").read_text())["chat"]["d"]["template_hash"]
              for out in ("out-plain", "out-saved")]
    assert hashes[0] == hashes[1]


@pytest.fixture
def named_templates(qwen3_tokenizer_dir, tmp_path) -> tuple[Path, Path, str, str]:
    """Qwen3 with two named templates, `default` (ChatML, which writes no tools) and `tool_use` (Qwen3's own),
    saved by transformers (`chat_template.jinja` + `additional_chat_templates/tool_use.jinja`) and as
    `tokenizer_config.json`'s list (the form transformers read and wrote before)."""
    default = named_template("chatml")
    tool_use = json.loads((qwen3_tokenizer_dir / "tokenizer_config.json").read_text())["chat_template"]
    tok = _auto(qwen3_tokenizer_dir)
    tok.chat_template = {"default": default, "tool_use": tool_use}
    files = tmp_path / "files"
    tok.save_pretrained(str(files))
    assert (files / "additional_chat_templates" / "tool_use.jinja").is_file()
    listed = _copy(qwen3_tokenizer_dir, tmp_path / "listed", config={
        "chat_template": [{"name": "default", "template": default}, {"name": "tool_use", "template": tool_use}]})
    return files, listed, default, tool_use


def test_named_templates_render_as_transformers_picks_them(named_templates):
    # A list of named templates read as "no chat template"; and a conversation with tools must get `tool_use`,
    # as transformers gives it, where the default template would drop the tools without a word.
    files, listed, default, tool_use = named_templates
    with_tools = conversation_from_record(MESSAGES, {"messages": MESSAGES, "tools": TOOLS})
    without = conversation_from_record(MESSAGES, {"messages": MESSAGES})
    for path in (files, listed):
        auto, handle = _auto(path), load_tokenizer(str(path))
        assert dict(handle.info.chat_templates) == {"default": default, "tool_use": tool_use}
        renderer = ChatRenderer.for_tokenizer(handle, handle.info.chat_template)
        expected_tools = auto.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False)
        expected = auto.apply_chat_template(MESSAGES, tokenize=False)
        assert expected_tools != expected and '"name": "add"' in expected_tools
        assert renderer.render(with_tools)[0] == expected_tools
        assert renderer.render(without)[0] == expected
        from easydata.compat.chat_transform import ChatTemplateTransform

        for tokenizer in (str(path), auto):  # the Python API, from a path and from the transformers object
            transform = ChatTemplateTransform(tokenizer)
            assert transform({"messages": MESSAGES, "tools": TOOLS})["text"] == expected_tools
            assert transform({"messages": MESSAGES})["text"] == expected
            named = ChatTemplateTransform(tokenizer, chat_template="tool_use")
            assert named({"messages": MESSAGES})["text"] == auto.apply_chat_template(
                MESSAGES, chat_template="tool_use", tokenize=False)


def test_chat_template_names_one_of_the_tokenizers_templates(named_templates, tmp_path):
    from easydata.run.run_plan import plan_datasets

    files, _, default, tool_use = named_templates
    data = write_jsonl(tmp_path / "chat.jsonl", _chat_records(5))

    def planned(**chat) -> str:
        config = PipelineConfig.from_dict({"default_tokenizer": str(files), "chat": chat, "datasets": [
            {"name": "d", "data_files": str(data), "content_field": "messages"}], "save": {"output_dir": "out"}})
        return plan_datasets(config)[0][0].chat_template

    assert planned() == default
    assert planned(template="tool_use") == tool_use
    assert planned(template="chatml") == default  # still the shipped one by that name
    with pytest.raises(ConfigError, match=r"neither one of the tokenizer's templates \(default, tool_use\), a "
                                          r"shipped template"):
        planned(template="rag")


def test_a_tokenizer_without_a_default_template_says_which_it_has(named_templates, tmp_path):
    _, listed, default, _ = named_templates
    settings = json.loads((listed / "tokenizer_config.json").read_text())
    settings["chat_template"] = [{"name": "rag", "template": default}, {"name": "tool_use", "template": default}]
    (listed / "tokenizer_config.json").write_text(json.dumps(settings))
    data = write_jsonl(tmp_path / "chat.jsonl", _chat_records(5))
    done = _run(tmp_path, listed, data, "out", datasets=[{"name": "d", "data_files": str(data),
                                                          "content_field": "messages"}])
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "has chat templates named rag, tool_use but none named 'default'" in done.stderr
    assert "set chat.template (one of those names" in done.stderr


def test_staged_tokenizers_carry_their_template_files(named_templates):
    # A remote job's workers load the tokenizer from the run's staging: the template files were not copied.
    files, _, _, _ = named_templates
    url = stage_tokenizer_files(str(files), "memory://staging/run/tok")
    local, remote = load_tokenizer(str(files)).info, load_tokenizer(url).info
    assert remote.chat_templates == local.chat_templates and len(remote.chat_templates) == 2
    assert remote.content_hash == local.content_hash


def test_a_cached_hub_tokenizer_finds_its_template_file(qwen3_tokenizer_dir, tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    template = json.loads((qwen3_tokenizer_dir / "tokenizer_config.json").read_text())["chat_template"]
    settings = {k: v for k, v in json.loads((qwen3_tokenizer_dir / "tokenizer_config.json").read_text()).items()
                if k != "chat_template"}
    _snapshot(cache, "model", "acme/qwen", {"tokenizer.json": (qwen3_tokenizer_dir / "tokenizer.json").read_bytes(),
                                            "tokenizer_config.json": json.dumps(settings).encode(),
                                            "chat_template.jinja": template.encode()})
    _snapshot(cache, "model", "acme/bare", {"tokenizer.json": (qwen3_tokenizer_dir / "tokenizer.json").read_bytes()})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert load_tokenizer("acme/qwen").info.chat_template == template
    # Online with a cache that holds tokenizer.json alone, the other files are asked for; a Hub that cannot be
    # reached leaves the cached tokenizer in use, as before.
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused at once
    tokenizer_file, _ = resolve_tokenizer_files("acme/bare")
    assert tokenizer_file.read_bytes() == (qwen3_tokenizer_dir / "tokenizer.json").read_bytes()


def test_special_tokens_declared_null_or_missing(mistral_tokenizer_dir, qwen3_tokenizer_dir, tmp_path):
    # `"bos_token": null` was overridden by `<s>` (a template's `{{ bos_token }}` then wrote it, where
    # transformers writes nothing); an EOS the vocabulary lacks read "declares no EOS token".
    null_bos = _copy(mistral_tokenizer_dir, tmp_path / "null-bos", config={"bos_token": None})
    assert _auto(null_bos).bos_token_id is None
    assert load_tokenizer(str(null_bos)).bos_token_id is None
    assert load_tokenizer(str(mistral_tokenizer_dir)).bos_token_id == 1
    template = "{% for m in messages %}{{ bos_token }}{{ m['content'] }}{{ eos_token }}{% endfor %}"
    handle = load_tokenizer(str(null_bos))
    expected = _auto(null_bos).apply_chat_template(MESSAGES, chat_template=template, tokenize=False)
    assert ChatRenderer.for_tokenizer(handle, template).render_text(
        conversation_from_record(MESSAGES, {"messages": MESSAGES})) == expected
    missing = _copy(qwen3_tokenizer_dir, tmp_path / "missing-eos", config={"eos_token": "<|eot_id|>"})
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in make_texts(5, seed=6)])
    done = _run(tmp_path, missing, data, "out")
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "declares eos_token '<|eot_id|>', which its vocabulary lacks, but tokenize.add_eos is true" in done.stderr


def test_a_declared_pad_token_the_vocabulary_lacks_is_named_where_rows_are_padded(mistral_tokenizer_dir, tmp_path,
                                                                                  capsys):
    # Packed rows were padded with the EOS id without a word, though the tokenizer names another pad token
    # (transformers would add '<pad>' as a new id, 32000, which the model has no embedding for).
    from easydata.run.run_plan import plan_datasets

    declared = _copy(mistral_tokenizer_dir, tmp_path / "pad", config={"pad_token": "<pad>"})
    assert _auto(declared).pad_token_id == 32000
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in make_texts(5, seed=6)])

    def plan(tokenizer: Path, pack: dict) -> tuple[int, str]:
        config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer), "pack": pack, "datasets": [
            {"name": "d", "data_files": str(data)}], "save": {"output_dir": str(tmp_path / "out")}})
        return plan_datasets(config)[0][0].pad_id, capsys.readouterr().err

    pad_id, said = plan(declared, {"enabled": True, "seq_length": 64})
    assert pad_id == 2
    assert said == ("easydata: warning: tokenizer '" + str(declared) + "' declares pad_token '<pad>', which its"
                    " vocabulary lacks: packed rows are padded with its EOS id 2 (set pack.pad_token_id to choose)\n")
    assert plan(declared, {"enabled": True, "seq_length": 64, "pad_token_id": 0}) == (0, "")  # chosen: no warning
    assert plan(declared, {"enabled": False})[1] == ""  # nothing padded
    assert plan(mistral_tokenizer_dir, {"enabled": True, "seq_length": 64}) == (2, "")  # declares none: as documented


def test_a_tokenizer_without_template_files_keeps_its_content_hash(qwen3_tokenizer_dir):
    # The content hash of a tokenizer without template files is what it was (outputs and resumes keep it).
    import hashlib

    hasher = hashlib.sha256((qwen3_tokenizer_dir / "tokenizer.json").read_bytes())
    hasher.update((qwen3_tokenizer_dir / "tokenizer_config.json").read_bytes())
    assert load_tokenizer(str(qwen3_tokenizer_dir)).info.content_hash == "sha256:" + hasher.hexdigest()


def test_a_tokenizer_cloned_without_git_lfs_says_so(qwen3_tokenizer_dir, tmp_path):
    # A Hub repo cloned without git-lfs holds a pointer in place of a large tokenizer.json (Gemma 3's is 33 MB):
    # "expected value at line 1 column 1".
    clone = _copy(qwen3_tokenizer_dir, tmp_path / "clone")
    (clone / "tokenizer.json").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32
                                          + "\nsize 11422650\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in make_texts(5, seed=7)])
    done = _run(tmp_path, clone, data, "out")
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "tokenizer.json': a Git LFS pointer, not the file's data: fetch it (git lfs pull" in done.stderr


def test_a_template_file_with_windows_line_endings_renders_as_transformers_reads_it(qwen3_tokenizer_dir, tmp_path):
    # transformers reads chat_template.jinja in text mode (each `\r\n` a `\n`), as `open(path).read()` reads a
    # template file; read as bytes, every newline the template writes came out as `\r\n`: other ids.
    saved = tmp_path / "saved"
    _auto(qwen3_tokenizer_dir).save_pretrained(str(saved))
    unix = (saved / "chat_template.jinja").read_bytes()
    (saved / "chat_template.jinja").write_bytes(unix.replace(b"\n", b"\r\n"))
    conversation = conversation_from_record(MESSAGES, {"messages": MESSAGES})
    handle = load_tokenizer(str(saved))
    expected = _auto(saved).apply_chat_template(MESSAGES, tokenize=False)
    assert "\r" not in expected
    assert ChatRenderer.for_tokenizer(handle, handle.info.chat_template).render_text(conversation) == expected
    from easydata.run.run_plan import load_chat_template

    assert load_chat_template(str(saved / "chat_template.jinja")) == unix.decode("utf-8")


def test_special_tokens_map_wins_over_tokenizer_config(mistral_tokenizer_dir, tmp_path):
    # transformers (4 and 5) lets special_tokens_map.json override tokenizer_config.json; the run read them the
    # other way round, and appended another EOS id to every document than the model was trained with.
    both = _copy(mistral_tokenizer_dir, tmp_path / "both")
    (both / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<unk>", "bos_token": "<s>"}))
    auto, handle = _auto(both), load_tokenizer(str(both))
    assert auto.eos_token == "<unk>" and auto.eos_token_id == 0
    assert (handle.bos_token_id, handle.eos_token_id) == (auto.bos_token_id, auto.eos_token_id) == (1, 0)


def test_a_transformers_tokenizer_object_is_read_as_it_is_now(qwen3_tokenizer_dir, tmp_path):
    # `TokenizedShardedSource(source, tokenizer=<AutoTokenizer>)` loaded the files the object came from
    # (`name_or_path`): a token added since (`add_tokens`) was split into pieces, an EOS set since was not used.
    from easydata.compat.sources import JsonShardedSource
    from easydata.compat.transforms import TokenizedShardedSource

    auto = _auto(qwen3_tokenizer_dir)
    auto.add_tokens(["<my_tag>"])
    texts = [f"{t} <my_tag> {t}" for t in make_texts(6, seed=8)]
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in texts))
    rows = list(TokenizedShardedSource(JsonShardedSource(str(tmp_path / "a.jsonl")), auto, add_eos=False, engine="hf"))
    assert [r["input_ids"] for r in rows] == auto(texts)["input_ids"]
    assert all(len(auto) - 1 in r["input_ids"] for r in rows)  # the added token's id


def test_a_hub_tokenizer_is_downloaded_with_its_template_files(named_templates, tmp_path):
    # Online, a hub id is downloaded with its config files, `chat_template.jinja` and the named templates of
    # `additional_chat_templates/` (a local server answers as the Hub does: tests/hub_server.py); a cache that
    # holds tokenizer.json alone (fetched by another tool) is completed; then the cache alone serves offline.
    # In a process of its own: huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE when first imported.
    from tests.hub_server import HubServer

    files, _, default, tool_use = named_templates
    repo = {p.relative_to(files).as_posix(): p.read_bytes() for p in files.rglob("*") if p.is_file()}
    assert set(repo) >= {"tokenizer.json", "chat_template.jinja", "additional_chat_templates/tool_use.jinja"}
    script = """
import json, sys
from huggingface_hub import hf_hub_download
from easydata.text.tokenizer import load_tokenizer
if sys.argv[1] == "online":
    hf_hub_download("acme/partial", "tokenizer.json")  # another tool fetched tokenizer.json alone
print(json.dumps({r: dict(load_tokenizer(r).info.chat_templates) for r in ("acme/saved", "acme/partial")}))
"""
    with HubServer({"acme/saved": repo, "acme/partial": repo}) as server:
        for mode in ("online", "offline"):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_ENDPOINT": server.url, "HF_HUB_CACHE": str(tmp_path),
                   "HF_HUB_OFFLINE": "1" if mode == "offline" else "0"}
            asked = len(server.requests)
            done = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, env=env,
                                  timeout=300)
            assert done.returncode == 0, done.stderr
            found = json.loads(done.stdout.strip().splitlines()[-1])
            assert found == {r: {"default": default, "tool_use": tool_use} for r in ("acme/saved", "acme/partial")}
            if mode == "online":
                assert "GET /api/models/acme/saved/tree/main/additional_chat_templates" in server.requests
                assert "GET /acme/partial/resolve/main/chat_template.jinja" in server.requests
            else:
                assert len(server.requests) == asked  # the cache alone


def test_a_tokenizer_file_of_another_name_is_staged_as_tokenizer_json(qwen3_tokenizer_dir, tmp_path):
    # Staging copied `tokenizer.json` from the file's folder: `my-tok.json` was staged without it, and every
    # remote worker failed with "has no tokenizer.json".
    own = tmp_path / "tok" / "my-tok.json"
    own.parent.mkdir()
    own.write_bytes((qwen3_tokenizer_dir / "tokenizer.json").read_bytes())
    url = stage_tokenizer_files(str(own), "memory://staging/run/my-tok")
    texts = make_texts(3, seed=9)
    staged, local = load_tokenizer(url), load_tokenizer(str(own))
    assert [e.ids for e in staged.tokenizer.encode_batch(texts)] == [e.ids for e in local.tokenizer.encode_batch(texts)]
