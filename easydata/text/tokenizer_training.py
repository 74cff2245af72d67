"""Training a byte-level tokenizer (BPE, or unigram) with Hugging Face `tokenizers`, saved in the layout
every easydata command loads (`tokenizer.json` + `tokenizer_config.json`).

Texts are consumed from an iterator, so a corpus is streamed, not loaded: `iter_training_texts` reads
data files with the pipeline's own readers (`easydata.io.sources`: every input type, compression,
local or remote) one batch of documents at a time, and the trainer keeps only its word counts. Chat
records contribute their messages' text. Byte-level models start from the 256 byte symbols, so they
can encode any text without an unknown token.

The special tokens come first in the vocabulary (ids 0, 1, 2, ... in the order given); the first
three are declared as BOS, EOS and PAD in `tokenizer_config.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from easydata.errors import ConfigError, InputError, OutputError

__all__ = ["train_tokenizer", "train_bpe_tokenizer", "train_tokenizer_from_files", "iter_training_texts",
           "DEFAULT_SPECIAL_TOKENS", "TOKENIZER_MODELS"]

DEFAULT_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")
TOKENIZER_MODELS = ("bpe", "unigram")


def train_tokenizer(texts: Iterable[str], output_dir: str | Path, *, vocab_size: int, model: str = "bpe",
                    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS, min_frequency: int = 2) -> Path:
    """Trains a byte-level `bpe` or `unigram` tokenizer on `texts` and saves it to `output_dir`.

    Args:
      texts: the training documents (any iterable; consumed once, streaming).
      output_dir: where `tokenizer.json` and `tokenizer_config.json` go (created if needed).
      vocab_size: target vocabulary size, special tokens included (BPE reaches it when the corpus has
        enough distinct merges; unigram may stop below it).
      model: `bpe` (GPT-2 style merges) or `unigram` (SentencePiece-style, over byte symbols).
      special_tokens: added first, in order; the first three are BOS, EOS, PAD.
      min_frequency: BPE: a merge needs at least this many occurrences.

    Returns:
      The output directory.

    Raises:
      ConfigError: a vocabulary too small for the byte alphabet, an unknown model, or duplicate tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    special_tokens = list(special_tokens)
    _check_arguments(vocab_size, model, special_tokens)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if model == "bpe":
        tokenizer = Tokenizer(models.BPE())
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=special_tokens, initial_alphabet=alphabet, show_progress=False)
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                          initial_alphabet=alphabet, show_progress=False)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainer=trainer)
    out = _output_directory(output_dir)
    names = ("bos_token", "eos_token", "pad_token")
    config = {name: token for name, token in zip(names, special_tokens)}
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_max_length"] = 1_000_000
    try:
        tokenizer.save(str(out / "tokenizer.json"))
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    except Exception as e:  # the disk, permissions: `tokenizers` raises its own exception type for its file
        raise OutputError(f"cannot write the tokenizer to '{out}': {getattr(e, 'strerror', None) or e}") from None
    return out


def _output_directory(output_dir: str | Path) -> Path:
    """`output_dir`, created if needed.

    Raises:
      OutputError: it cannot be (a file in its path, no permission), in one line.
    """
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output '{out}' exists and is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot write the tokenizer to '{out}': {e.strerror or e}") from None
    return out


#: The files training writes into its output directory (an existing one is replaced only with `overwrite`).
TRAINED_FILES = ("tokenizer.json", "tokenizer_config.json")
#: The largest vocabulary `train-tokenizer` trains (its memory grows with the size asked for, not the data).
MAX_VOCAB_SIZE = 2**21


def _check_arguments(vocab_size: int, model: str, special_tokens: list[str]) -> None:
    if model not in TOKENIZER_MODELS:
        raise ConfigError(f"tokenizer model must be one of {', '.join(TOKENIZER_MODELS)}, got {model!r}")
    if len(set(special_tokens)) != len(special_tokens):
        raise ConfigError(f"special tokens must be distinct, got {special_tokens}")
    if vocab_size > MAX_VOCAB_SIZE:  # the trainer would try to allocate tens of GB and abort
        raise ConfigError(f"`vocab_size` must be at most {MAX_VOCAB_SIZE:,} (the largest vocabularies in use are"
                          f" ~260k), got {vocab_size:,}")
    if vocab_size < 256 + len(special_tokens):
        raise ConfigError(f"`vocab_size` must be at least {256 + len(special_tokens)} for a byte-level"
                          f" tokenizer (256 bytes + {len(special_tokens)} special tokens), got {vocab_size}")


def train_bpe_tokenizer(texts: Iterable[str], output_dir: str | Path, *, vocab_size: int,
                        special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS, min_frequency: int = 2) -> Path:
    """`train_tokenizer` with `model="bpe"`."""
    return train_tokenizer(texts, output_dir, vocab_size=vocab_size, model="bpe", special_tokens=special_tokens,
                           min_frequency=min_frequency)


def iter_training_texts(data_files: str | Sequence[str], *, content_field: str = "text", type: Optional[str] = None,
                        sample_by: str = "line", num_rows: Optional[int] = None,
                        messages_field: str = "messages", counts: Optional[dict[str, int]] = None,
                        on_batch: Optional[Callable[[int, int], None]] = None) -> Iterator[str]:
    """Streams the documents of data files as training text, one reader batch at a time.

    Args:
      data_files: paths, globs or URLs (as a dataset's `data_files`).
      content_field, type, sample_by: as in a dataset config.
      num_rows: stop after this many documents.
      messages_field: chat records: the field holding the messages (their contents are the text).
      counts: if given, receives `documents` and `rejected` (records no text could be read from).
      on_batch: if given, called with each batch's input bytes and the documents taken from it (for progress;
        `counts["input_bytes_total"]`, the bytes reading will count in all, is then set before the first text).

    Raises:
      InputError: a glob that matches nothing or a missing file (before anything is read).
    """
    from easydata.config import DatasetConfig
    from easydata.io.sources import plan_splits, read_split, text_bytes

    dataset = DatasetConfig(name="train-tokenizer", data_files=data_files if isinstance(data_files, str)
                            else list(data_files), type=type, content_field=content_field, sample_by=sample_by)
    counts = counts if counts is not None else {}
    counts.update(documents=0, rejected=0)
    rejects: list = []
    splits = plan_splits(dataset)
    if on_batch is not None:  # the bytes reading counts (a compressed file's decompressed): what it reports
        counts["input_bytes_total"] = text_bytes(splits, dataset, messages_field)
    for split in splits:
        for batch in read_split(split, dataset, rejects=rejects, messages_field=messages_field):
            conversations = batch.conversations or [None] * len(batch)
            taken = 0
            for text, conversation in zip(batch.texts, conversations):
                if num_rows is not None and counts["documents"] >= num_rows:
                    counts["rejected"] = sum(r.records for r in rejects)
                    return
                counts["documents"] += 1
                taken += 1
                if conversation is not None:
                    text = "\n".join(m.get("content") or "" for m in conversation.messages)
                yield text
            if on_batch is not None:
                on_batch(batch.input_bytes, taken)
    counts["rejected"] = sum(r.records for r in rejects)


def train_tokenizer_from_files(data_files: str | Sequence[str], output_dir: str | Path, *, vocab_size: int,
                               model: str = "bpe", special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
                               min_frequency: int = 2, overwrite: bool = False,
                               progress: Optional[Callable[[int], Any]] = None,
                               **read_options: object) -> tuple[Path, dict[str, int]]:
    """`easydata train-tokenizer`: trains on data files, streaming them.

    `progress`, if given, makes the display of the reading from the bytes it will count (the CLI's: an
    `easydata.run.progress.CountProgress`); the display gets `update(bytes, documents)` per batch, `stage(text)`
    when the reading is over and the vocabulary is learned, and `close()`.

    Returns:
      The output directory and the `documents` / `rejected` counts.

    Raises:
      ConfigError: a vocabulary size, model, special tokens or `num_rows` that cannot be.
      OutputError: `output_dir` already holds a tokenizer and `overwrite` is false.
      InputError: the files hold no usable document.
    """
    _check_arguments(vocab_size, model, list(special_tokens))
    num_rows = read_options.get("num_rows")
    if num_rows is not None and (not isinstance(num_rows, int) or num_rows < 1):
        raise ConfigError(f"`num_rows` must be a positive number of documents, got {num_rows}")
    out = Path(output_dir)
    existing = [name for name in TRAINED_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise OutputError(f"'{out}' already holds a tokenizer's files ({', '.join(existing)}); pass --overwrite to"
                          " replace them, or choose another --output")
    created = not out.exists()
    _output_directory(out)  # before reading and training, which may take hours
    counts: dict[str, int] = {}
    shown: list[Any] = []  # the progress display, made at the first batch (the total is known by then)

    def on_batch(nbytes: int, documents: int) -> None:
        if not shown and progress is not None:
            shown.append(progress(counts["input_bytes_total"]))
        shown[0].update(nbytes, documents)

    texts = iter_training_texts(data_files, counts=counts, on_batch=on_batch if progress is not None else None,
                                **read_options)  # type: ignore[arg-type]
    try:
        first = next(texts, None)
        if first is None:
            raise InputError(f"no document to train on in {data_files!r} ({counts.get('rejected', 0)} records"
                             " rejected; check --content-field / --type)")
        train_tokenizer(_ended(_chain(first, texts), shown, vocab_size), out, vocab_size=vocab_size, model=model,
                        special_tokens=special_tokens, min_frequency=min_frequency)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # made for this training, which wrote nothing into it
        raise
    finally:
        for display in shown:
            display.close()
    return out, counts


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def _ended(texts: Iterator[str], shown: list[Any], vocab_size: int) -> Iterator[str]:
    """`texts`, then (when progress is shown) a line that the reading is over and the merges are learned: the
    trainer's second phase, which on a large vocabulary takes minutes of its own."""
    yield from texts
    for display in shown:
        display.stage(f"learning a vocabulary of {vocab_size:,} from the documents read")
