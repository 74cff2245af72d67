"""Runs the code blocks of EasyData's own documentation (tests/data/easydata-docs, copied from
../shared/easydata-docs) as written, with only `easydel.data` replaced by `easydata`.

`DocsWorld` is the machine a page's reader has: a working directory holding the files the blocks
name (`data/*.parquet`, `conversations/*.jsonl`, ...), a real Hugging Face cache (in the standard
`models--owner--name/snapshots/<sha>` layout) holding the hub ids they name, used with
`HF_HUB_OFFLINE=1` (no network), and bucket URLs (`gs://bucket/...`) pointing at local directories,
the one other substitution the pages need. Names a block uses but never defines (`train_step`,
`my_transform_fn`, `code_ds`, ...) are given as the page implies, and so are the `easydata` names
the page imports in earlier blocks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import make_texts, write_jsonl

DOCS = Path(__file__).parent / "data" / "easydata-docs"

#: A real chat template (Llama 2 chat's), for the `-chat-hf` model of the cache.
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

MODELS = ("meta-llama/Llama-2-7b", "meta-llama/Llama-2-7b-chat-hf", "bigcode/starcoder")
HUB_DATASET = "HuggingFaceFW/fineweb"


def code_blocks(page: str) -> list[str]:
    """The page's ```python blocks, `easydel.data` -> `easydata`."""
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    return [block.replace("easydel.data", "easydata") for block in re.findall(r"```python\n(.*?)```", text, re.S)]


def _snapshot(cache: Path, kind: str, repo_id: str, files: dict[str, bytes]) -> Path:
    """A repo in the Hugging Face cache layout: `<kind>s--owner--name/{refs/main, snapshots/<sha>/...}`."""
    sha = f"{abs(hash(repo_id)):040x}"[:40]
    repo = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    snapshot = repo / "snapshots" / sha
    for name, data in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_bytes(data)
    return snapshot


def _parquet(path: Path, columns: dict[str, list[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _conversations(n: int, seed: int) -> Iterator[dict[str, Any]]:
    texts = make_texts(2 * n, seed=seed, min_words=20, max_words=120)
    for i in range(n):
        yield {"messages": [{"role": "system", "content": "You are helpful."},
                            {"role": "user", "content": texts[2 * i]},
                            {"role": "assistant", "content": texts[2 * i + 1]}]}


class DocsWorld:
    """The files, hub cache and environment the pages' blocks expect, rooted at `root`."""

    def __init__(self, root: Path, tokenizer_dir: Path):
        self.root, self.work, self.buckets = root, root / "work", root / "buckets"
        self.cache = root / "hf-cache"
        self.tokenizer_dir = tokenizer_dir
        self.work.mkdir(parents=True, exist_ok=True)
        self._files()
        self._hub()

    def _files(self) -> None:
        w, b = self.work, self.buckets
        long = dict(min_words=100, max_words=300)
        for i in range(2):
            _parquet(w / "data" / f"part-{i}.parquet", {"text": make_texts(400, seed=10 + i, **long)})
            texts = make_texts(300, seed=20 + i, **long) + make_texts(1, seed=40 + i, min_words=2500, max_words=2600)
            write_jsonl(w / "data" / f"part-{i}.jsonl", ({"text": t, "metadata": {"i": j}} for j, t in enumerate(texts)))
        write_jsonl(w / "more_data" / "a.jsonl", ({"text": t} for t in make_texts(100, seed=3)))
        write_jsonl(w / "raw_data" / "a.jsonl", ({"text": t} for t in make_texts(300, seed=4, **long)))
        write_jsonl(w / "code_data" / "a.jsonl", ({"code": t} for t in make_texts(100, seed=5)))
        _parquet(w / "text_data" / "a.parquet", {"text": make_texts(100, seed=6)})
        write_jsonl(w / "conversations" / "a.jsonl", _conversations(600, seed=7))
        texts = make_texts(600, seed=8, **long)
        _parquet(b / "bucket" / "data" / "a.parquet", {"text": texts, "content": texts})
        _parquet(b / "input-bucket" / "data" / "a.parquet", {"text": texts})
        for name, n, seed in (("code", 600, 30), ("text", 750, 31), ("math", 150, 32)):
            _parquet(b / "bucket" / name / "a.parquet", {"text": make_texts(n, seed=seed, **long)})
        shutil.copytree(self.tokenizer_dir, w / "llama")  # `tokenizer="llama"`: a local directory

    def _hub(self) -> None:
        tokenizer = (self.tokenizer_dir / "tokenizer.json").read_bytes()
        config = json.loads((self.tokenizer_dir / "tokenizer_config.json").read_text())
        for repo in MODELS:
            if repo.endswith("-chat-hf"):
                config = {**config, "chat_template": LLAMA2_CHAT_TEMPLATE}
            model = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000}
            _snapshot(self.cache, "model", repo, {"tokenizer.json": tokenizer, "config.json": json.dumps(model).encode(),
                                                  "tokenizer_config.json": json.dumps(config).encode()})
        table = io.BytesIO()
        pq.write_table(pa.table({"text": make_texts(200, seed=9), "id": list(range(200))}), table)
        _snapshot(self.cache, "dataset", HUB_DATASET, {"data/train-00000-of-00001.parquet": table.getvalue()})

    def source(self, page: str, index: int) -> str:
        """Block `index` of `page` with bucket URLs pointing at the local buckets."""
        return code_blocks(page)[index].replace("gs://", f"{self.buckets}/")

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """The working directory and environment of the page's reader (offline hub, own caches)."""
        saved = dict(os.environ)
        cwd = os.getcwd()
        os.environ.update(HF_HUB_CACHE=str(self.cache), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                          EASYDATA_CACHE=str(self.root / "easydata-cache"))
        os.chdir(self.work)
        # huggingface_hub (and transformers through it) read these once, at import: a reader's fresh
        # session would have them from its environment.
        from huggingface_hub import constants

        hub_saved = {k: getattr(constants, k) for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE")}
        constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE = str(self.cache), True
        try:
            yield
        finally:
            for key, value in hub_saved.items():
                setattr(constants, key, value)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved)

    def run(self, page: str, index: int, namespace: Optional[dict[str, Any]] = None,
            replace: Optional[dict[str, str]] = None) -> tuple[dict[str, Any], str]:
        """Executes a block as written in `namespace` (given names + what earlier blocks defined);
        returns the namespace and what it printed."""
        code = self.source(page, index)
        for old, new in (replace or {}).items():
            assert old in code, f"{page} block {index} no longer contains {old!r}"
            code = code.replace(old, new)
        import easydata

        # A block continues its page: names the page imported in an earlier block (or, in two places,
        # forgot to import) are there, as in the reader's session.
        ns = {name: getattr(easydata, name) for name in easydata.__all__}
        ns.update(namespace or {})
        ns.setdefault("batches", [])
        ns.setdefault("train_step", ns["batches"].append)
        ns.setdefault("sft_train_step", ns["batches"].append)
        ns.setdefault("pretrain_step", ns["batches"].append)
        printed = io.StringIO()
        with self.inside(), contextlib.redirect_stdout(printed):
            exec(compile(code, f"<{page}.md block {index}>", "exec"), ns)  # noqa: S102 - the page's own code
        return ns, printed.getvalue()
