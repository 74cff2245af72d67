"""Loading Hugging Face fast tokenizers offline, and batched encoding to int32 token arrays.

`load_tokenizer` accepts a directory with `tokenizer.json` (plus optional `tokenizer_config.json` /
`special_tokens_map.json`), a `tokenizer.json` file, or a hub id `owner/name` (read from the local
Hugging Face cache, else downloaded into it by `easydata.io.hub` unless `HF_HUB_OFFLINE=1`). Special-token ids (BOS/EOS/PAD) come from the
tokenizer's own files or from explicit overrides, never from hard-coded numbers.

`TokenizerHandle.encode_batch` runs the Rust tokenizer on a whole batch (it releases the GIL and
uses its own threads), then builds one flat int32 array plus offsets, so later stages move numpy /
Arrow buffers instead of Python lists.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from easydata.text import long_texts
from easydata.text.chat_templates import template_file_text, tool_template
from easydata.text.engines import flat_ids
from easydata.config import TokenizerConfig
from easydata.errors import TokenizerError
from easydata.text.windows import cut_documents
from easydata.io.documents import lfs_pointer
from easydata.io.hub import CHAT_TEMPLATE_DIR, CHAT_TEMPLATE_FILE, CONFIG_FILES, TOKENIZER_FILES
from easydata.io.token_arrays import surround

__all__ = ["TokenizerHandle", "TokenizerInfo", "load_tokenizer", "preload_tokenizers", "resolve_tokenizer_files",
           "shared_tokenizer", "choose_engine_here", "without_length_settings", "saved_copy"]

# Names under which tokenizers commonly declare their special tokens, tried in order when
# `tokenizer_config.json` says nothing. They are looked up in the tokenizer's own vocabulary.
_BOS_CANDIDATES = ("<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|startoftext|>")
_EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "[SEP]", "<|im_end|>")
_PAD_CANDIDATES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>")


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    """What the manifest records about a tokenizer."""

    name_or_path: str
    content_hash: str
    vocab_size: int
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]
    pad_token_id: Optional[int]
    chat_templates: tuple[tuple[str, str], ...] = ()  # (name, jinja text): `chat_templates`

    @property
    def chat_template(self) -> Optional[str]:
        """Its `default` chat template (what a chat record is rendered with unless `chat.template` is set)."""
        return dict(self.chat_templates).get("default")

    def tool_template(self, template: Optional[str]) -> Optional[str]:
        """What conversations with tools are rendered with, `template` chosen: `chat_templates.tool_template`."""
        return tool_template(dict(self.chat_templates), template)

    def to_manifest(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("chat_templates")
        return data


def resolve_tokenizer_files(name_or_path: str) -> tuple[Path, Optional[Path]]:
    """Finds `tokenizer.json` and the directory holding its config files, without network access.

    Raises:
      TokenizerError: when nothing matching is found locally.
    """
    if "://" in name_or_path and not name_or_path.startswith("file://"):
        return _fetched(name_or_path)
    path = Path(os.path.expanduser(name_or_path))
    if path.is_file():
        return without_length_settings(path), path.parent
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return without_length_settings(path / "tokenizer.json"), path
        raise TokenizerError(f"tokenizer directory '{name_or_path}' has no tokenizer.json"
                             " (only fast tokenizers are supported; convert with transformers first)")
    if looks_like_path(name_or_path):
        parent = path.parent
        where = f" ('{parent}' exists, but holds no '{path.name}')" if str(parent) not in ("", ".") and parent.is_dir() \
            else ""
        raise TokenizerError(f"tokenizer '{name_or_path}': no such file or directory{where}; a path must name a"
                             " directory with tokenizer.json or the file itself")
    if is_hub_id(name_or_path):
        cached = _hub_tokenizer(name_or_path)
        return without_length_settings(cached), cached.parent
    if not path.suffix:
        cached, _ = _from_hf_cache(name_or_path)
        if cached is not None:
            return without_length_settings(cached), cached.parent
    raise TokenizerError(
        f"tokenizer '{name_or_path}' not found: give a directory with tokenizer.json, a tokenizer.json file,"
        " or a hub id 'owner/name' (downloaded into the Hugging Face cache; from the cache with HF_HUB_OFFLINE=1)")


def looks_like_path(name_or_path: str) -> bool:
    """A spec written as a local path, not a hub id: it starts with `.`, `/` or `~`, ends in `.json`, or its
    parent directory exists here (`tok/mistral-7b` where `tok/` exists): a typo in it must not be looked
    up on the Hub."""
    if "://" in name_or_path:
        return False
    if name_or_path.startswith((".", "/", "~")) or name_or_path.endswith(".json"):
        return True
    parent = Path(os.path.expanduser(name_or_path)).parent
    return str(parent) not in ("", ".") and parent.is_dir()


def is_hub_id(name_or_path: str) -> bool:
    """`owner/name` that is not a local path: a Hugging Face hub id."""
    return (name_or_path.count("/") == 1 and "://" not in name_or_path and not looks_like_path(name_or_path)
            and not Path(os.path.expanduser(name_or_path)).exists())


_FETCHED: dict[str, tuple[Path, Path]] = {}


def stage_tokenizer_files(name_or_path: str, url: str) -> str:
    """Copies a tokenizer's files (`tokenizer.json` as runs read it, then `side_files`) into `url` (a directory
    on any file system); returns `url`."""
    from easydata.io.filesystems import get_fs, join

    tokenizer_file, config_dir = resolve_tokenizer_files(name_or_path)
    fs, root = get_fs(url)
    fs.makedirs(root, exist_ok=True)
    for name, data in {"tokenizer.json": tokenizer_file.read_bytes(), **side_files(config_dir)}.items():
        if "/" in name:
            fs.makedirs(join(root, name.rpartition("/")[0]), exist_ok=True)
        with fs.open(join(root, name), "wb") as f:
            f.write(data)
    return url


def _fetched(url: str) -> tuple[Path, Path]:
    """A tokenizer directory on a remote file system (one the launcher staged), copied to this machine
    once per process (`_local_copy`)."""
    from easydata.io.filesystems import get_fs, join

    if url not in _FETCHED:
        fs, root = get_fs(url)
        files: dict[str, bytes] = {}
        try:
            named = [f"{CHAT_TEMPLATE_DIR}/{p.rpartition('/')[2]}"
                     for p in fs.glob(join(root, CHAT_TEMPLATE_DIR, "*.jinja"))]
        except OSError:
            named = []
        for name in (*TOKENIZER_FILES, *sorted(named)):
            try:
                with fs.open(join(root, name), "rb") as f:
                    files[name] = f.read()
            except FileNotFoundError:
                if name == "tokenizer.json":
                    raise TokenizerError(f"tokenizer '{url}' has no tokenizer.json") from None
            except OSError as e:
                raise TokenizerError(f"cannot read tokenizer '{url}': {e}") from None
        local = _local_copy(files)
        _FETCHED[url] = (without_length_settings(local / "tokenizer.json"), local)
    return _FETCHED[url]


#: `tokenizer.json`'s settings that change the length of every encoding `tokenizers` makes.
LENGTH_SETTINGS = ("truncation", "padding")
_PLAIN: dict[tuple[str, int, int], Path] = {}


def without_length_settings(tokenizer_file: Path) -> Path:
    """`tokenizer_file`, or a copy of it without `truncation` and `padding` when it sets them.

    A tokenizer saved after a call with `truncation=True, max_length=...` or after `enable_padding` keeps them
    in `tokenizer.json` (sentence-transformers' tokenizers ship both), and `tokenizers` and the fast engines
    apply them to every encoding: each document cut to `max_length` and padded with pad ids, without a word.
    `transformers` turns both off unless a call asks for them, and so does this: the ids are the document's
    whole encoding (`tokenize.max_length` and `truncation` are how a run cuts). The copy is shared like a
    fetched tokenizer's (`_local_copy`); every reader of the tokenizer (the run, its engines, the content hash)
    uses it, so the hash names the ids the run gives.
    """
    import re

    try:
        status = tokenizer_file.stat()
    except OSError:
        return tokenizer_file  # loading names the problem
    key = (str(tokenizer_file), status.st_mtime_ns, status.st_size)
    if key in _PLAIN:
        return _PLAIN[key]
    with open(tokenizer_file, "rb") as f:
        head = f.read(1 << 16)  # `tokenizers` writes both first: `{"version":"1.0","truncation":null,"padding":null,`
    plain = tokenizer_file
    if not all(re.search(rb'"%s"\s*:\s*null' % name.encode(), head) for name in LENGTH_SETTINGS):
        try:
            content = json.loads(tokenizer_file.read_bytes())
        except ValueError:
            content = None  # loading names the problem
        if isinstance(content, dict) and any(content.get(name) is not None for name in LENGTH_SETTINGS):
            content.update({name: None for name in LENGTH_SETTINGS})
            data = json.dumps(content, ensure_ascii=False).encode("utf-8")
            plain = _local_copy({"tokenizer.json": data}) / "tokenizer.json"
    _PLAIN[key] = plain
    return plain


def saved_copy(tokenizer: Any) -> Path:
    """A `transformers` fast tokenizer object as files, as it is now: `save_pretrained` into a directory named
    by their content (`_local_copy`). Loading the files it came from (its `name_or_path`) lost what was done to
    it since: tokens added (`add_tokens`: a text with one was split into pieces), special tokens and templates
    set."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}
    return _local_copy(files)


def _local_copy(files: dict[str, bytes]) -> Path:
    """A directory holding `files`, named by their content (`easydata-tokenizer-<sha256>` in the temporary
    directory), so that every worker process and every run on this machine that fetches the same files
    shares one copy (a copy per process was never removed: a local job with a `gs://` tokenizer left one
    per worker per run). A copy is written under a name of its own (`mkdtemp`: this user's alone) and renamed
    into place, so no process sees another's half-written copy; one found there is used only if this user
    owns it, no one else can write to it and it holds exactly these files (else this process keeps a copy
    of its own)."""
    import shutil
    import tempfile

    digest = hashlib.sha256()
    for name, data in sorted(files.items()):
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    shared = Path(tempfile.gettempdir()) / f"easydata-tokenizer-{digest.hexdigest()[:24]}"

    def holds_them() -> bool:
        try:
            status = shared.stat()
            held = {p.relative_to(shared).as_posix() for p in shared.rglob("*") if not p.is_dir()}
            return (status.st_uid == os.getuid() and not status.st_mode & 0o022 and held == set(files)
                    and all((shared / name).read_bytes() == data for name, data in files.items()))
        except OSError:
            return False

    if holds_them():
        return shared
    own = Path(tempfile.mkdtemp(prefix=f"{shared.name}.tmp-"))
    for name, data in files.items():
        (own / name).parent.mkdir(parents=True, exist_ok=True)
        (own / name).write_bytes(data)
    try:
        os.rename(own, shared)  # fails when `shared` exists (another process's, or something else)
        return shared
    except OSError:
        if holds_them():
            shutil.rmtree(own, ignore_errors=True)
            return shared
    return own


def _from_hf_cache(repo_id: str) -> tuple[Optional[Path], bool]:
    """A hub tokenizer's cached `tokenizer.json` (None: not cached), and whether the cache also knows of its
    other files (`easydata.io.hub.TOKENIZER_FILES`: each cached, or known not to exist). A cache that holds
    `tokenizer.json` alone (fetched by another tool, or before chat template files were fetched) does not."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None, False
    try:
        from easydata.io.hub import cache_dir

        found = try_to_load_from_cache(repo_id, "tokenizer.json", cache_dir=cache_dir())
        if not isinstance(found, str):
            return None, False
        return Path(found), all(try_to_load_from_cache(repo_id, name, cache_dir=cache_dir()) is not None
                                for name in TOKENIZER_FILES[1:])
    except Exception:  # invalid repo ids raise a validation error: treat as "not cached"
        return None, False


def _hub_tokenizer(repo_id: str) -> Path:
    """A hub tokenizer's `tokenizer.json` from the cache, or downloaded with its other files when the cache
    does not hold them all and the Hub may be asked; the cached one when the Hub cannot give them.

    Raises:
      TokenizerError: not cached, and it cannot be downloaded (`download_tokenizer`).
    """
    from easydata.io.hub import download_tokenizer, hub_offline

    cached, complete = _from_hf_cache(repo_id)
    if cached is not None and (complete or hub_offline()):
        return cached
    try:
        return download_tokenizer(repo_id)
    except TokenizerError:
        if cached is None:
            raise
        return cached


def _token_content(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def side_files(config_dir: Optional[Path]) -> dict[str, bytes]:
    """The files beside `tokenizer.json` that shape its ids, by their path under `config_dir`: `CONFIG_FILES`,
    then the chat template files (`CHAT_TEMPLATE_FILE`, `CHAT_TEMPLATE_DIR/*.jinja`), in the order they are
    hashed."""
    if config_dir is None:
        return {}
    folder = config_dir / CHAT_TEMPLATE_DIR
    named = sorted(f"{CHAT_TEMPLATE_DIR}/{p.name}" for p in folder.glob("*.jinja")) if folder.is_dir() else []
    return {name: (config_dir / name).read_bytes() for name in (*CONFIG_FILES, CHAT_TEMPLATE_FILE, *named)
            if (config_dir / name).is_file()}


def _hash_files(tokenizer_json: bytes, files: dict[str, bytes]) -> str:
    """`sha256:<hex>` of `tokenizer.json` and its `side_files` (a template file with its name: the name says
    which conversations it renders)."""
    hasher = hashlib.sha256(tokenizer_json)
    for name, data in files.items():
        hasher.update(data if name in CONFIG_FILES else name.encode() + b"\0" + data)
    return "sha256:" + hasher.hexdigest()


def chat_templates(config: dict[str, Any], files: dict[str, bytes]) -> dict[str, str]:
    """A tokenizer's chat templates by name, found as `transformers` finds them: the template files
    (`CHAT_TEMPLATE_FILE` is `default`) when there are any, else `tokenizer_config.json`'s `chat_template`, a
    text (`default`) or a list of `{"name", "template"}` (Command R's, Hermes 2 Pro's)."""
    found = {name.rpartition("/")[2].removesuffix(".jinja") if "/" in name else "default": template_file_text(data)
             for name, data in files.items() if name == CHAT_TEMPLATE_FILE or name.startswith(CHAT_TEMPLATE_DIR)}
    if found:
        return found
    declared = config.get("chat_template")
    if isinstance(declared, str):
        return {"default": declared}
    if isinstance(declared, list):
        return {t["name"]: t["template"] for t in declared
                if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)}
    return {}


def tokenizer_content_hash(name_or_path: str) -> str:
    """`sha256:<hex>` of a tokenizer's files (`tokenizer.json`, then `side_files`): the identity of the ids
    it gives, as the manifest records it (`TokenizerInfo.content_hash`), without loading the tokenizer.

    Raises:
      TokenizerError: the tokenizer cannot be found (`resolve_tokenizer_files`).
    """
    tokenizer_file, config_dir = resolve_tokenizer_files(name_or_path)
    return _hash_files(tokenizer_file.read_bytes(), side_files(config_dir))


class TokenizerHandle:
    """A loaded tokenizer plus the special-token conventions the pipeline applies.

    Args:
      config: which tokenizer and optional special-token overrides.
    """

    def __init__(self, config: TokenizerConfig):
        from tokenizers import Tokenizer

        self.config = config
        tokenizer_file, config_dir = resolve_tokenizer_files(config.name_or_path)
        self.tokenizer_file = tokenizer_file
        self._engines: dict[str, Any] = {}
        raw = tokenizer_file.read_bytes()
        try:
            self.tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as e:
            why = lfs_pointer(raw[:64]) or e  # a repo cloned without git-lfs holds pointers to large files
            raise TokenizerError(f"cannot load tokenizer '{tokenizer_file}': {why}") from None
        files = side_files(config_dir)
        meta: dict[str, Any] = {}
        for name in ("tokenizer_config.json", "special_tokens_map.json"):  # the map's tokens win, as in transformers
            if name in files:
                try:
                    meta.update(json.loads(files[name]))
                except ValueError as e:  # invalid JSON, or not UTF-8
                    raise TokenizerError(f"'{config_dir / name}' is not valid JSON: {e}") from None
        try:
            templates = chat_templates(meta, files)
        except UnicodeDecodeError as e:
            raise TokenizerError(f"a chat template file of '{config.name_or_path}' is not UTF-8: {e}") from None
        #: special tokens its config files declare that its vocabulary lacks (kind -> text): named in errors
        self.missing_specials: dict[str, str] = {}
        self.bos_token_id = self._special_id(config.bos_token, meta, _BOS_CANDIDATES, "bos")
        self.eos_token_id = self._special_id(config.eos_token, meta, _EOS_CANDIDATES, "eos")
        if config.eos_token_id is not None:  # `pack.eos_token_id`: an id, checked against the vocabulary
            if self.tokenizer.id_to_token(config.eos_token_id) is None:
                raise TokenizerError(f"pack.eos_token_id {config.eos_token_id} is not an id of '{config.name_or_path}'"
                                     f" (vocabulary of {self.tokenizer.get_vocab_size(with_added_tokens=True)})")
            self.eos_token_id = config.eos_token_id
        self.pad_token_id = self._special_id(config.pad_token, meta, _PAD_CANDIDATES, "pad")
        self.info = TokenizerInfo(
            name_or_path=config.name_or_path,
            content_hash=_hash_files(raw, files),
            vocab_size=self.tokenizer.get_vocab_size(with_added_tokens=True),
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            chat_templates=tuple(templates.items()),
        )

    def _special_id(self, override: Optional[str], meta: dict[str, Any], candidates: Sequence[str],
                    kind: str) -> Optional[int]:
        """The id of the `kind` special token: the configured one, else what the config files declare (`null`
        there: none, as `transformers` reads it), else the first of `candidates` among its special tokens."""
        if override is not None:
            token_id = self.tokenizer.token_to_id(override)
            if token_id is None:
                raise TokenizerError(f"{kind}_token '{override}' is not in the vocabulary of"
                                     f" '{self.config.name_or_path}'")
            return token_id
        declared = meta.get(f"{kind}_token")
        if f"{kind}_token" in meta and declared is None:
            return None
        declared_text = _token_content(declared)
        if declared_text is not None:
            token_id = self.tokenizer.token_to_id(declared_text)
            if token_id is None:
                self.missing_specials[kind] = declared_text
            return token_id
        special = {t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special}
        for candidate in candidates:
            if candidate in special:
                return self.tokenizer.token_to_id(candidate)
        return None

    def __getstate__(self) -> dict[str, Any]:
        """A copy (another process's) loads its own engines: they hold native state that does not pickle."""
        return {**self.__dict__, "_engines": {}}

    def choose_engine(self, requested: str, sample: Sequence[str], add_special_tokens: Optional[bool]
                      ) -> tuple[Any, Any]:
        """`easydata.text.engines.choose_engine` for this tokenizer on `sample` (the engines it loads stay
        loaded here), and the chosen engine as `verified_engine` gives it: `(EngineChoice, VerifiedEngine
        or None)`. For steps that choose where they run (the Python API, a stream's workers)."""
        from easydata.text.engines import choose_engine, special_token_strings

        choice = choose_engine(requested, self.tokenizer_file, self.tokenizer, special_token_strings(self.tokenizer),
                               sample, add_special_tokens=add_special_tokens, loaded=self._engines)
        return choice, self.verified_engine(choice.name)

    def verified_engine(self, name: str) -> Any:
        """Engine `name` checked against `hf` while it runs (`easydata.text.engines.VerifiedEngine`); None
        for `hf` itself."""
        from easydata.text.engines import VerifiedEngine

        return None if name == "hf" else VerifiedEngine(self.engine(name), self.engine("hf"))

    def engine(self, name: str) -> Any:
        """The tokenizer engine `name` for this tokenizer (`easydata.text.engines`), loaded once per process
        (in the worker, after any fork: engines may start threads)."""
        if name not in self._engines:
            from easydata.text.engines import load_engine

            try:
                self._engines[name] = load_engine(name, self.tokenizer_file, self.tokenizer)
            except Exception as e:
                self._engines[name] = e  # not tried again: planning's verifier learns why from here
        if isinstance(self._engines[name], Exception):
            raise self._engines[name]
        return self._engines[name]

    def encode_plain(self, texts: Sequence[str], *, add_bos: Optional[bool], keys: Optional[Sequence[str]] = None,
                     engine: Any = None) -> Any:
        """The Rust half of `encode_batch`: one batched call (it releases the GIL), no conversion.

        Returns the tokenizer's `Encoding`s, for `plain_ids`; with `engine` (a
        `easydata.text.engines.VerifiedEngine`, which checks a sample of `keys` against `tokenizers`),
        `(flat ids, lengths)` arrays instead. Run on a helper thread, this lets the calling thread
        convert the previous batch while the Rust threads encode the next one.
        """
        if engine is not None:
            return engine.encode(texts, keys if keys is not None else [str(i) for i in range(len(texts))],
                                 add_special_tokens=add_bos is None)
        if long_texts.is_long(texts):  # very long documents in pieces, to the same ids, in bounded memory
            return long_texts.encode_flat(self.tokenizer, texts, add_special_tokens=add_bos is None,
                                          rule=self.cut_rule())
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return encode(list(texts), add_special_tokens=add_bos is None)

    def cut_rule(self) -> Optional["long_texts.CutRule"]:
        """Where this tokenizer's very long texts may be cut (`easydata.text.long_texts`), found once."""
        if not hasattr(self, "_cut_rule"):
            self._cut_rule = long_texts.rule_for(self.tokenizer)
        return self._cut_rule

    def plain_ids(self, encodings: Any, *, add_bos: Optional[bool], add_eos: bool,
                  max_length: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
        """The Python half of `encode_batch`: `Encoding`s (or an engine's `(flat ids, lengths)`) ->
        `(flat_ids, offsets)` with special tokens."""
        flat, lengths = encodings if isinstance(encodings, tuple) else flat_ids(encodings)
        ids, offsets, _ = _apply_specials(flat, lengths, bos=self.bos_token_id if add_bos else None,
                                          eos=self.eos_token_id if add_eos else None, max_length=max_length)
        return ids, offsets

    def encode_batch(self, texts: Sequence[str], *, add_bos: Optional[bool], add_eos: bool,
                     max_length: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
        """Tokenizes `texts` in one Rust call.

        Args:
          texts: the documents.
          add_bos: None keeps the tokenizer's own special-token convention (its post-processor);
            True/False encodes without it and prepends BOS or not.
          add_eos: append EOS unless the document already ends with it.
          max_length: keep at most this many tokens per document (EOS included).

        Returns:
          `(flat_ids, offsets)`: int32 token ids of all documents back to back, and int64 offsets of
          length `len(texts) + 1` so document `i` is `flat_ids[offsets[i]:offsets[i + 1]]`.
        """
        return self.plain_ids(self.encode_plain(texts, add_bos=add_bos), add_bos=add_bos, add_eos=add_eos,
                              max_length=max_length)

    def encode_chat(self, texts: Sequence[str]) -> list[Any]:
        """The Rust half of `encode_chat_batch`: `Encoding`s with character offsets, nothing added (a very
        long text's as a `long_texts.PiecedEncoding`, encoded in pieces)."""
        rule = self.cut_rule() if long_texts.is_long(texts) else None
        if rule is None:
            return self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        short = [i for i, t in enumerate(texts) if len(t) <= long_texts.LONG_TEXT_CHARS]
        out: list[Any] = [None] * len(texts)
        for i, encoding in zip(short, self.tokenizer.encode_batch([texts[i] for i in short], add_special_tokens=False)):
            out[i] = encoding
        for i, text in enumerate(texts):
            if out[i] is None:
                out[i] = long_texts.encode_in_pieces(self.tokenizer, text, rule, with_offsets=True)
        return out

    def chat_ids(self, encodings: Sequence[Any], spans: Sequence[Sequence[tuple[int, int]]], *, add_eos: bool,
                 max_length: Optional[int] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The Python half of `encode_chat_batch`: `Encoding`s -> `(flat_ids, offsets, flat_loss_mask)`."""
        masks = []
        for encoding, doc_spans in zip(encodings, spans):
            char_offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
            mask = np.zeros(len(char_offsets), dtype=bool)
            for start, end in doc_spans:
                mask |= (char_offsets[:, 0] < end) & (char_offsets[:, 1] > start)
            masks.append(mask.astype(np.int32))
        flat, lengths = flat_ids(encodings)
        mask_flat = np.concatenate(masks) if masks else np.zeros(0, np.int32)
        ids, offsets, mask = _apply_specials(flat, lengths, bos=None, eos=self.eos_token_id if add_eos else None,
                                             max_length=max_length, mask=mask_flat)
        return ids, offsets, mask.astype(np.int32, copy=False)

    def encode_chat_batch(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *, add_eos: bool,
                          max_length: Optional[int] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokenizes rendered chat texts and marks the tokens overlapping their trained spans.

        The text comes from a chat template, which places its own special tokens, so nothing is
        added but an EOS (if `add_eos` and the text does not already end with it; its mask is 0).

        Returns:
          `(flat_ids, offsets, flat_loss_mask)`: as `encode_batch`, plus an int32 0/1 mask aligned
          with `flat_ids`.
        """
        return self.chat_ids(self.encode_chat(texts), spans, add_eos=add_eos, max_length=max_length)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(map(int, ids)), skip_special_tokens=skip_special_tokens)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where BOS / EOS go when they are added (see `_special_layout`)."""

    offsets: np.ndarray  # new document boundaries
    lengths: np.ndarray  # each document's input length
    front: np.ndarray    # 1 where a BOS is prepended
    back: np.ndarray     # 1 where an EOS is appended

    def apply(self, values: np.ndarray, bos_value: int, eos_value: int) -> np.ndarray:
        """`values` (aligned with the input ids) laid out like the output ids, specials filled in
        (`token_arrays.surround`: an empty document gets BOS then EOS)."""
        return surround(values, self.lengths, [bos_value], [eos_value], front=self.front > 0, back=self.back > 0)


def _special_layout(flat: np.ndarray, lengths: np.ndarray, *, bos: Optional[int], eos: Optional[int]) -> _Layout:
    """Plans prepending BOS / appending EOS (unless a document already has it), vectorised over the batch."""
    n = len(lengths)
    starts = np.cumsum(lengths) - lengths
    safe = max(len(flat) - 1, 0)
    nonempty = lengths > 0
    front = np.zeros(n, dtype=np.int64)
    back = np.zeros(n, dtype=np.int64)
    if bos is not None:
        front = (~(nonempty & (flat[np.minimum(starts, safe)] == bos)) if len(flat) else np.ones(n, bool))
        front = front.astype(np.int64)
    if eos is not None:
        last = np.clip(starts + lengths - 1, 0, safe)
        back = (~(nonempty & (flat[last] == eos)) if len(flat) else np.ones(n, bool)).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(front + lengths + back)]).astype(np.int64)
    return _Layout(offsets=offsets, lengths=lengths, front=front, back=back)


def _apply_specials(flat: np.ndarray, lengths: np.ndarray, *, bos: Optional[int], eos: Optional[int],
                    max_length: Optional[int], mask: Optional[np.ndarray] = None
                    ) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Prepends BOS / appends EOS, then truncates to `max_length` the one way documents are truncated
    (`easydata.text.windows.cut_documents`); returns `(flat_ids, offsets, mask)` (an added special's
    mask is 0)."""
    if bos is None and eos is None:
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    else:
        layout = _special_layout(flat, lengths, bos=bos, eos=eos)
        flat, offsets = layout.apply(flat, bos or 0, eos or 0), layout.offsets
        mask = None if mask is None else layout.apply(mask, 0, 0)
    if max_length is None:
        return flat, offsets, mask
    pieces = cut_documents(flat, offsets, mode="truncate", max_length=max_length, bos=bos, eos=eos, mask=mask)
    return pieces.ids, pieces.offsets, pieces.mask


def load_tokenizer(spec: str | TokenizerConfig) -> TokenizerHandle:
    """Loads a tokenizer from a path, hub id or `TokenizerConfig`."""
    config = spec if isinstance(spec, TokenizerConfig) else TokenizerConfig(name_or_path=spec)
    return TokenizerHandle(config)


#: Handles `preload_tokenizers` loaded in this process, by config.
_PRELOADED: dict[TokenizerConfig, TokenizerHandle] = {}


def preload_tokenizers(configs: Iterable[TokenizerConfig], engines: Sequence[str] = ()) -> None:
    """Loads each tokenizer now, for `shared_tokenizer` to hand out later in this process.

    A local worker server calls this before it forks its workers (`beam_pipelines.local.local_worker`): each
    worker then starts with the tokenizer loaded, instead of every worker parsing the same
    `tokenizer.json` (a fraction of a second each, all at the start of tokenizing). The first fast engine's
    own tokenizer loads on a thread beside `hf`'s (`easydata.text.engines.prefetch_engine`); every loading
    thread has ended when this returns, and loading starts no tokenizer thread, so forking afterwards is
    safe. A tokenizer that fails to load is left out: the step that needs it loads it again and reports the
    error there.
    """
    from easydata.text.engines import end_prefetches, known_refusal, prefetch_engine

    configs = [config for config in dict.fromkeys(configs) if config not in _PRELOADED]  # each once
    for config in configs:  # the first fast engine's own tokenizer loads (without the GIL) while hf's does
        try:
            prefetch_engine(engines, resolve_tokenizer_files(config.name_or_path)[0])
        except Exception:  # noqa: BLE001 - e.g. no such tokenizer: the step's own load reports it
            pass
    for config in configs:
        try:
            _PRELOADED[config] = TokenizerHandle(config)
        except Exception:  # noqa: BLE001 - e.g. an unreadable file: the step's own load reports it
            pass
    for handle in _PRELOADED.values():  # the fast engine the job will use, where planning accepts it: the first
        for name in engines:            # of `engines` that loads (loading one starts no thread) and is not
            if known_refusal(handle.tokenizer_file, name) is not None:  # known to refuse this tokenizer
                continue
            try:
                handle.engine(name)
                break
            except Exception:  # noqa: BLE001 - e.g. fastokens and a Metaspace tokenizer: never used then
                continue
    end_prefetches()


def choose_engine_here(config: TokenizerConfig, requested: str, sample: Sequence[str],
                       add_special_tokens: Optional[bool]) -> Any:
    """`easydata.text.engines.choose_engine` for `config` with what this process has loaded (its
    tokenizer and fast engines: a local worker server's preloads, `preload_tokenizers`), so that a job's
    planning need not load the same engine again in the launching process. Returns the `EngineChoice`."""
    return shared_tokenizer(config).choose_engine(requested, sample, add_special_tokens)[0]


def shared_tokenizer(config: TokenizerConfig) -> TokenizerHandle:
    """The handle `preload_tokenizers` loaded for `config` in this process, else a newly loaded one.

    For pipeline steps' `setup`: a handle is read-only once loaded (encoding changes no setting), so
    the steps of one worker may share it.
    """
    handle = _PRELOADED.get(config)
    return handle if handle is not None else TokenizerHandle(config)
