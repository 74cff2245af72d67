"""Tokenizer engines: what turns plain documents' text into ids, and the checks that keep them honest.

`hf` (Hugging Face `tokenizers`) is the reference: token ids are defined as its output. `fastokens`
(byte-level BPE, 30-70x `tokenizers`' single-thread speed; it refuses SentencePiece `Metaspace`
tokenizers) and `gigatoken` (byte-level BPE and SentencePiece BPE with byte fallback, 5-10x) are
faster Rust engines, used only where they give exactly `hf`'s ids:

* at planning (`choose_engine`), on a sample of the run's own documents and a built-in adversarial
  set (`adversarial_texts`), with and without special tokens; the adversarial verdict is cached per
  (tokenizer.json sha256, engine, engine version) under the easydata cache. With local worker
  processes the choice is made in a child of their fork server, which has the engine loaded for the
  workers anyway (`beam_pipelines.local.local_worker`), so the engine is loaded once per job;
* while running (`VerifiedEngine`), on a deterministic sample of documents (chosen by a hash of
  their key, `VERIFY_FRACTION`), re-encoded with `hf` on the worker: a mismatch keeps `hf`'s ids for
  that document and is counted, and after `MAX_MISMATCHES` the worker uses `hf` for the rest.

Only plain documents go through an engine: chat documents need character offsets for their loss
masks, which only `hf` gives. Special tokens are the tokenizer's own post-processor's (a fast engine
that lacks one has `hf`'s added around its ids, and is verified like that).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import zlib
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from easydata.config import ENGINE_NAMES  # `tokenize.engine`'s values, written once in the config
from easydata.io.token_arrays import surround

__all__ = ["ENGINE_NAMES", "FAST_ENGINES", "Engine", "EngineChoice", "VerifiedEngine", "load_engine",
           "choose_engine", "prefetch_engine", "end_prefetches", "verify_engine", "known_refusal", "fast_candidates",
           "special_token_strings", "adversarial_texts", "VERIFY_FRACTION", "MAX_MISMATCHES", "engine_version"]

#: The fast engines `auto` tries, fastest first (benchmarks/bench_pipeline.py).
FAST_ENGINES = ("fastokens", "gigatoken")
#: Share of documents re-encoded with `hf` while a fast engine runs (chosen by a hash of the key).
VERIFY_FRACTION = 0.01
#: Mismatches after which a worker stops using the fast engine.
MAX_MISMATCHES = 3
#: Changes whenever `adversarial_texts` grows: cached verdicts of an older set are not trusted.
ADVERSARIAL_SET_VERSION = 2


def fast_candidates(requested: str) -> tuple[str, ...]:
    """The fast engines `tokenize.engine: requested` may use, in the order they are tried."""
    return FAST_ENGINES if requested == "auto" else tuple(n for n in (requested,) if n != "hf")


def special_token_strings(hf: Any) -> list[str]:
    """The text of every added token of a `tokenizers` tokenizer (what the adversarial set embeds)."""
    return [t.content for t in hf.get_added_tokens_decoder().values()]


def engine_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version({"hf": "tokenizers"}.get(name, name))
    except metadata.PackageNotFoundError:
        return "not installed"


class Engine:
    """Encodes plain documents: `encode(texts, add_special_tokens) -> (flat int32 ids, int64 lengths)`.

    Args:
      tokenizer_file: the tokenizer's `tokenizer.json`.
      hf: the same tokenizer loaded by `tokenizers` (the reference).
      native: what `load_native(tokenizer_file)` returned, when it was loaded ahead (`prefetch_engine`).
    """

    name = "hf"

    def __init__(self, tokenizer_file: Path, hf: Any, native: Any = None):
        self.tokenizer_file, self.hf = tokenizer_file, hf
        self.version = engine_version(self.name)

    @staticmethod
    def load_native(tokenizer_file: Path) -> Any:
        """The engine's own tokenizer, loaded from `tokenizer_file` alone (no `hf` needed), so that it can
        load while `hf` does; None for `hf` itself."""
        return None

    def encode(self, texts: Sequence[str], add_special_tokens: bool) -> tuple[np.ndarray, np.ndarray]:
        from easydata.text import long_texts

        if long_texts.is_long(texts):  # very long documents in pieces, to the same ids (easydata.text.long_texts)
            if not hasattr(self, "_cut_rule"):
                self._cut_rule = long_texts.rule_for(self.hf)
            return long_texts.encode_flat(self.hf, texts, add_special_tokens=add_special_tokens, rule=self._cut_rule)
        encode = getattr(self.hf, "encode_batch_fast", self.hf.encode_batch)
        return flat_ids(encode(list(texts), add_special_tokens=add_special_tokens))


def flat_ids(encodings: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """`tokenizers` `Encoding`s -> all their ids back to back (int32) and each one's length (int64).

    `np.fromiter` over a chain of the `Encoding.ids` lists, each made as it is consumed: one document's
    Python ints exist at a time (lengths come from `len(encoding)`, which makes no list).
    """
    import itertools

    lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    flat = np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), dtype=np.int32,
                       count=int(lengths.sum()))
    return flat, lengths


class _Specials:
    """The ids the `hf` post-processor puts before and after a single document (`TemplateProcessing`,
    ...), for engines that encode without them: found by encoding a probe with and without."""

    def __init__(self, hf: Any):
        from easydata.text.long_texts import post_processor_ids

        self.prefix, self.suffix = post_processor_ids(hf)

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return surround(flat, lengths, self.prefix, self.suffix), lengths + len(self.prefix) + len(self.suffix)


class FastokensEngine(Engine):
    name = "fastokens"

    def __init__(self, tokenizer_file: Path, hf: Any, native: Any = None):
        super().__init__(tokenizer_file, hf)
        self._tokenizer = native if native is not None else self.load_native(tokenizer_file)

    @staticmethod
    def load_native(tokenizer_file: Path) -> Any:
        import fastokens

        return fastokens.Tokenizer.from_file(str(tokenizer_file))

    def encode(self, texts: Sequence[str], add_special_tokens: bool) -> tuple[np.ndarray, np.ndarray]:
        ids, offsets = self._tokenizer.encode_batch_flat(list(texts), add_special_tokens=add_special_tokens)
        bounds = np.frombuffer(offsets, dtype="<u8").astype(np.int64)
        # ids (< 2**31: a vocabulary) as int32 where they lie: a read-only view, not a copy of every id
        return np.frombuffer(ids, dtype="<i4").astype(np.int32, copy=False), np.diff(bounds)


class GigatokenEngine(Engine):
    name = "gigatoken"

    def __init__(self, tokenizer_file: Path, hf: Any, native: Any = None):
        super().__init__(tokenizer_file, hf)
        import awkward  # what its batches come as

        self._tokenizer = native if native is not None else self.load_native(tokenizer_file)
        self._specials = _Specials(hf)
        self._ak = awkward

    @staticmethod
    def load_native(tokenizer_file: Path) -> Any:
        import awkward  # noqa: F401 - imported here, where a worker server preloads the engine before it
        import gigatoken  # forks, not at each worker's first batch

        return gigatoken.Tokenizer(str(tokenizer_file))

    def encode(self, texts: Sequence[str], add_special_tokens: bool) -> tuple[np.ndarray, np.ndarray]:
        from easydata.memory import tokenizer_scratch

        with tokenizer_scratch():  # its 8 and 16 MiB blocks of scratch per call stay in glibc's heap
            encoded = self._tokenizer.encode_batch(list(texts))
        flat, lengths = self._flat(encoded)
        return self._specials.add(flat, lengths) if add_special_tokens else (flat, lengths)

    def _flat(self, encoded: Any) -> tuple[np.ndarray, np.ndarray]:
        """gigatoken's batch (an awkward array of uint32 ids, one list per document) -> flat int32 ids and
        int64 lengths: the ids as a view of the array's own buffer (< 2**31: a vocabulary) when it is one
        list-offset layout over plain numbers, as gigatoken makes it; through awkward's copies otherwise."""
        ak, layout = self._ak, encoded.layout
        if isinstance(layout, ak.contents.ListOffsetArray) and isinstance(layout.content, ak.contents.NumpyArray):
            offsets, ids = np.asarray(layout.offsets.data), np.asarray(layout.content.data)
            if ids.dtype in (np.uint32, np.int32) and ids.ndim == 1 and offsets.dtype == np.int64:
                return ids[offsets[0]:offsets[-1]].view(np.int32), np.diff(offsets)
        flat = np.asarray(ak.to_numpy(ak.flatten(encoded)), dtype=np.int32)
        return flat, np.asarray(ak.to_numpy(ak.num(encoded)), dtype=np.int64)


_ENGINES = {"hf": Engine, "fastokens": FastokensEngine, "gigatoken": GigatokenEngine}


def load_engine(name: str, tokenizer_file: Path, hf: Any) -> Engine:
    """The engine `name` for this tokenizer (with its native tokenizer from `prefetch_engine`, when that
    started loading it: waits for it).

    Raises:
      ValueError / ImportError / anything the engine raises: it cannot load this tokenizer.
    """
    prefetched = _PREFETCH.pop((str(tokenizer_file), name), None)
    native = prefetched.result() if prefetched is not None else None  # raises what loading it raised
    return _ENGINES[name](tokenizer_file, hf, native)


#: Native tokenizers loading on threads of their own, by (tokenizer file, engine name): `load_engine` takes them.
_PREFETCH: dict[tuple[str, str], Any] = {}
#: The executors of those threads, for `end_prefetches` to join.
_PREFETCH_POOLS: list[Any] = []


def prefetch_engine(candidates: Sequence[str], tokenizer_file: Path) -> Optional[str]:
    """Starts loading the native tokenizer of the first of `candidates` that is installed and not known to
    refuse this tokenizer (`known_refusal`), on a thread of its own (loading releases the GIL; a large
    vocabulary takes seconds), so that loading `hf` and planning's other work overlap with it; the next
    `load_engine` of it takes the result. Returns the engine's name, or None when there is none."""
    import concurrent.futures

    for name in candidates:
        if engine_version(name) == "not installed" or known_refusal(tokenizer_file, name) is not None:
            continue
        if (str(tokenizer_file), name) not in _PREFETCH:
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="easydata-engine-prefetch")
            _PREFETCH[(str(tokenizer_file), name)] = pool.submit(_ENGINES[name].load_native, tokenizer_file)
            pool.shutdown(wait=False)
            _PREFETCH_POOLS.append(pool)
        return name
    return None


def end_prefetches() -> None:
    """Waits until every `prefetch_engine` thread has ended (before a fork: a child must not inherit
    a native load half done); what they loaded stays for `load_engine`."""
    while _PREFETCH_POOLS:
        _PREFETCH_POOLS.pop().shutdown(wait=True)


# ---- verification --------------------------------------------------------------------------------

def adversarial_texts(special_tokens: Sequence[str]) -> list[str]:
    """Texts where tokenizers disagree when they disagree at all (deterministic)."""
    import random

    rng = random.Random(1234)
    languages = [
        "The quick brown fox jumps over the lazy dog.", "Der schnelle braune Fuchs springt über den faulen Hund.",
        "Le vif renard brun saute par-dessus le chien paresseux.", "El veloz zorro marrón salta sobre el perro.",
        "Быстрая коричневая лиса прыгает через ленивую собаку.", "敏捷的棕色狐狸跳过了懒狗。", "素早い茶色の狐が怠け者の犬を飛び越える。",
        "빠른 갈색 여우가 게으른 개를 뛰어넘는다.", "الثعلب البني السريع يقفز فوق الكلب الكسول.", "השועל החום המהיר קופץ מעל הכלב העצלן.",
        "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।", "জলদি বাদামী শিয়াল অলস কুকুরের উপর লাফ দেয়।", "Η γρήγορη καφέ αλεπού πηδά πάνω από το σκυλί.",
        "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.", "Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
        "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ", "Szybki brązowy lis przeskakuje nad leniwym psem.",
        "Den raske brune reven hopper over den late hunden.", "Rubah coklat yang cepat melompati anjing malas.",
        "Mbweha mwepesi wa kahawia anaruka juu ya mbwa mvivu.", "Ang mabilis na kayumangging soro ay tumalon.",
        "Швидка руда лисиця перестрибує через ледачого пса.", "ტყის სწრაფი ყავისფერი მელა", "Ο Θεός αγάπη ἐστίν",
    ]
    code = ["def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
            "SELECT id, name FROM users WHERE age >= 18;\n", "<div class=\"a\">&amp; &#x27;</div>\n",
            "\tif x:\n\t\tpass\r\n", "λx. x → ∀y ∈ ℝ, y² ≥ 0", "0.1 + 0.2 != 0.3e-10 // 12,345,678.90"]
    odd = ["", " ", "  ", "\n", "\n\n\n", "   leading", "trailing   ", "a  b   c    d", "\t \t", "\x00null\x00byte",
           "\x01\x02\x1b[31mred\x1b[0m", "\u200b\u200c\u200d\ufeff", "👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs",
           "é (e + ◌́: e\u0301) vs é", "ﬁ ligature, Ｆｕｌｌｗｉｄｔｈ", "a" * 3000, " " * 500 + "x",
           "\r\n" * 50, "🙂" * 200, "\ud7ff\ue000\uffff"]
    specials = [text for t in special_tokens for text in added_token_contexts(t)] + ["".join(special_tokens)]
    alphabet = [chr(c) for c in (*range(32, 127), *range(0xA0, 0x250), *range(0x370, 0x3FF), *range(0x400, 0x4FF),
                                 *range(0x4E00, 0x4E80), *range(0x1F300, 0x1F350), 0x200D, 0xFE0F, 10, 9, 32, 32, 32)]
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(200)]
    mixed = [" ".join(rng.choice(languages + code) for _ in range(20)) for _ in range(20)]
    long = " ".join(languages * 40) + "\n".join(code * 40)
    return [*languages, *code, *odd, *specials, *fuzz, *mixed, long]


def added_token_contexts(token: str) -> list[str]:
    """Texts that exercise an added token's flags: `single_word` (glued to a word on either side, doubled,
    inside punctuation), `lstrip` / `rstrip` (spaces, tabs and newlines around it), `normalized` (case and
    width variants the normalizer may fold into it) and its plain use between words."""
    return [f"before {token} after", f"a{token}b", f"word{token}", f"{token}word", f"{token}{token}",
            f"({token})", f"x {token}y", f"x{token} y", f"  {token}  z", f"\t{token}\n", f"\n\n{token}\n\n",
            f"{token.upper()} {token.lower()} {token.swapcase()}", f"{token} {token}. {token},{token}",
            f"１{token}２ {token}"]


def verify_engine(engine: Engine, reference: Engine, texts: Sequence[str],
                  expected: Optional[dict[bool, tuple[np.ndarray, np.ndarray]]] = None,
                  settings: Sequence[bool] = (False, True)) -> Optional[str]:
    """None when `engine` gives `reference`'s ids for every text with each `add_special_tokens` of
    `settings` (default: without and with special tokens); else where they first differ. `expected`:
    `reference`'s output per setting, when known."""
    texts = list(texts)
    for add in settings:
        want = expected[add] if expected is not None else reference.encode(texts, add)
        got = engine.encode(texts, add)
        if not (np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])):
            return _first_difference(texts, got, want, add)
    return None


def _first_difference(texts: Sequence[str], got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray],
                      add: bool) -> str:
    got_at, want_at = np.concatenate([[0], np.cumsum(got[1])]), np.concatenate([[0], np.cumsum(want[1])])
    for i in range(len(texts)):
        a = got[0][got_at[i]:got_at[i + 1]] if i < len(got[1]) else np.zeros(0)
        b = want[0][want_at[i]:want_at[i + 1]]
        if not np.array_equal(a, b):
            return (f"document {i} ({texts[i][:40]!r}...) differs"
                    f"{' with special tokens' if add else ''}: {len(a)} ids instead of {len(b)}")
    return "the batch's document count differs"


@dataclasses.dataclass
class EngineChoice:
    """What a run encodes plain documents with, and why (recorded in the manifest)."""

    name: str
    version: str
    requested: str
    reason: str
    planning_documents: int = 0
    adversarial_documents: int = 0

    def to_manifest(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "requested": self.requested, "reason": self.reason,
                "verified_at_planning": {"documents": self.planning_documents,
                                         "adversarial": self.adversarial_documents}}


def _verdict_file(digest: str, name: str, version: str) -> Path:
    from easydata.cache import cache_root

    return cache_root() / "engine-verdicts" / f"{digest[:32]}-{name}-{version}-a{ADVERSARIAL_SET_VERSION}.json"


def _cached_verdict(digest: str, name: str, version: str) -> Optional[dict[str, Any]]:
    try:
        cached = json.loads(_verdict_file(digest, name, version).read_text())
    except (OSError, ValueError):
        return None
    return cached if isinstance(cached, dict) else None


def known_refusal(tokenizer_file: Path, name: str) -> Optional[str]:
    """Why engine `name` is known not to serve this tokenizer (its cached verdict: it could not load it,
    or differed from `hf` on the adversarial set), else None: then it is worth loading."""
    version = engine_version(name)
    cached = _cached_verdict(hashlib.sha256(Path(tokenizer_file).read_bytes()).hexdigest(), name, version)
    return _refusal(name, version, cached) if cached is not None else None


def _refusal(name: str, version: str, verdict: dict[str, Any]) -> Optional[str]:
    if not verdict.get("problem"):
        return None
    return f"{name} {version} {'cannot load this tokenizer' if verdict.get('load_failed') else 'differs from hf'}:" \
           f" {verdict['problem']}"


def choose_engine(requested: str, tokenizer_file: Path, hf: Any, special_tokens: Sequence[str],
                  sample: Sequence[str], add_special_tokens: Optional[bool] = None,
                  loaded: Optional[dict[str, Any]] = None) -> EngineChoice:
    """The engine a run uses: `hf` when asked, else the first engine (the one asked, or for `auto` the
    fastest installed) that loads and gives `hf`'s ids on the adversarial set with and without special
    tokens (verdict cached per tokenizer, engine and version) and on `sample` (the run's own documents)
    with the run's setting `add_special_tokens` (None: both); `hf` with the reason when none does.
    `loaded`: engines this process already loaded for this tokenizer (by name), used as they are, or
    the exception loading one raised; what this call loads is added to it (so that a caller that keeps
    it, `TokenizerHandle.choose_engine`, never loads an engine twice)."""
    import concurrent.futures

    reference = Engine(tokenizer_file, hf)
    if requested == "hf":
        return EngineChoice("hf", reference.version, requested, "asked for")
    versions = {name: engine_version(name) for name in fast_candidates(requested)}
    reasons = [f"{name} is not installed" for name, version in versions.items() if version == "not installed"]
    digest = hashlib.sha256(tokenizer_file.read_bytes()).hexdigest()
    verdicts = {name: _cached_verdict(digest, name, version) for name, version in versions.items()
                if version != "not installed"}
    candidates = []
    for name, cached in verdicts.items():  # refused before (cached per tokenizer and version): not loaded again
        refusal = _refusal(name, versions[name], cached) if cached is not None else None
        if refusal is not None:
            reasons.append(refusal)
        else:
            candidates.append(name)
    adversarial: list[str] = []  # built when an engine without a cached verdict is verified
    settings = (False, True) if add_special_tokens is None else (add_special_tokens,)
    expected: dict[str, dict[bool, tuple[np.ndarray, np.ndarray]]] = {}
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="easydata-engine-load")
    try:
        # Loading an engine (about a second for a large vocabulary; it releases the GIL) overlaps with the
        # reference encodings; the next candidate loads only if the first is refused.
        def load(name: str) -> Any:
            if loaded and name in loaded:
                done: concurrent.futures.Future = concurrent.futures.Future()
                if isinstance(loaded[name], BaseException):
                    done.set_exception(loaded[name])
                else:
                    done.set_result(loaded[name])
                return done
            return pool.submit(load_engine, name, tokenizer_file, hf)  # with a prefetched native tokenizer

        first = load(candidates[0]) if candidates else None
        if candidates:  # meanwhile (tokenizers releases the GIL): what the first candidate is compared with
            expected["sample"] = {add: reference.encode(sample, add) for add in settings}
            if verdicts[candidates[0]] is None:
                adversarial.extend(adversarial_texts(special_tokens))
                expected["adversarial"] = {add: reference.encode(adversarial, add) for add in (False, True)}
        for name in candidates:
            version = versions[name]
            verdict_file = _verdict_file(digest, name, version)
            try:
                engine = (first if name == candidates[0] else load(name)).result()
            except Exception as e:  # noqa: BLE001 - any load failure means hf
                if loaded is not None:
                    loaded[name] = e
                problem = f"{type(e).__name__}: {str(e)[:120]}"
                reasons.append(f"{name} {version} cannot load this tokenizer: {problem}")
                if isinstance(e, ValueError):  # it refuses this tokenizer's content: remembered (not so for
                    _write_verdict(verdict_file, {"engine": name, "version": version,  # e.g. MemoryError)
                                                  "problem": problem, "load_failed": True})
                continue
            if loaded is not None:
                loaded[name] = engine
            problem = None  # a cached verdict with a problem was refused above
            if verdicts[name] is None:
                if "adversarial" not in expected:
                    adversarial.extend(adversarial_texts(special_tokens))
                    expected["adversarial"] = {add: reference.encode(adversarial, add) for add in (False, True)}
                problem = verify_engine(engine, reference, adversarial, expected["adversarial"])
                _write_verdict(verdict_file, {"engine": name, "version": version, "problem": problem,
                                              "documents": len(adversarial)})
            if problem is None:
                problem = verify_engine(engine, reference, sample, expected["sample"], settings)
            if problem is None:
                checked = len(adversarial) if verdicts[name] is None else verdicts[name].get("documents", 0)
                return EngineChoice(name, version, requested, "verified equal to hf", len(sample), checked)
            reasons.append(f"{name} {version} differs from hf: {problem}")
    finally:
        pool.shutdown(wait=False)
    return EngineChoice("hf", reference.version, requested, "; ".join(reasons) or "no fast engine")


def _write_verdict(path: Path, verdict: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(f".tmp-{os.getpid()}")
        temp.write_text(json.dumps(verdict))
        os.replace(temp, path)
    except OSError:  # a read-only cache: verified again next time
        pass


# ---- while running -------------------------------------------------------------------------------

def sampled(key: str, fraction: float = VERIFY_FRACTION) -> bool:
    """Whether the document with this key is re-encoded with `hf` (deterministic: the same documents on
    every runner, worker and retry)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % 100_000 < fraction * 100_000


class VerifiedEngine:
    """A fast engine checked against `hf` on a deterministic sample of documents as it runs.

    A mismatch keeps `hf`'s ids for that document and is counted; after `max_mismatches` this worker uses
    `hf` for everything. `take_counts()` hands the counters over (per bundle, for the manifest).
    """

    def __init__(self, engine: Engine, reference: Engine, *, fraction: float = VERIFY_FRACTION,
                 max_mismatches: int = MAX_MISMATCHES):
        self.engine, self.reference, self.fraction, self.max_mismatches = engine, reference, fraction, max_mismatches
        self.switched = False
        self._lock = threading.Lock()
        self._mismatches = 0  # in all, for the switch to hf
        self._counts = {"documents": 0, "verified": 0, "mismatches": 0, "hf_documents": 0}  # since take_counts

    def encode(self, texts: Sequence[str], keys: Sequence[str], add_special_tokens: bool
               ) -> tuple[np.ndarray, np.ndarray]:
        if self.switched:
            self._count(hf_documents=len(texts))
            return self.reference.encode(texts, add_special_tokens)
        flat, lengths = self.engine.encode(texts, add_special_tokens)
        chosen = [i for i, key in enumerate(keys) if sampled(key, self.fraction)]
        mismatched = 0
        if chosen:
            want_flat, want_lengths = self._recheck([texts[i] for i in chosen], add_special_tokens)
            starts = np.concatenate([[0], np.cumsum(lengths)])
            want_starts = np.concatenate([[0], np.cumsum(want_lengths)])
            replace = {}
            for j, i in enumerate(chosen):
                want = want_flat[want_starts[j]:want_starts[j + 1]]
                if not np.array_equal(flat[starts[i]:starts[i + 1]], want):
                    replace[i] = want
            if replace:
                mismatched = len(replace)
                pieces = [replace.get(i, flat[starts[i]:starts[i + 1]]) for i in range(len(texts))]
                lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
                flat = np.concatenate(pieces).astype(np.int32) if pieces else flat
        self._count(documents=len(texts), verified=len(chosen), mismatches=mismatched)
        self._mismatches += mismatched
        if self._mismatches >= self.max_mismatches:
            self.switched = True
        return flat, lengths

    def _recheck(self, texts: list[str], add_special_tokens: bool) -> tuple[np.ndarray, np.ndarray]:
        """The sampled documents encoded again with `hf`: a step of its own, so that a profile tells the
        re-check (`benchmarks/stage_profile.py`) from the engine's encoding."""
        return self.reference.encode(texts, add_special_tokens)

    def _count(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                self._counts[key] += value

    def take_counts(self) -> dict[str, int]:
        with self._lock:
            counts = dict(self._counts)
            self._counts = dict.fromkeys(self._counts, 0)
        return counts
