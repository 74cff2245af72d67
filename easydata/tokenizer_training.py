"""Training a byte-level BPE tokenizer with Hugging Face `tokenizers`, saved in the layout every
easydata command loads (`tokenizer.json` + `tokenizer_config.json`).

Texts are consumed from an iterator, so a corpus is streamed, not loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["train_bpe_tokenizer", "DEFAULT_SPECIAL_TOKENS"]

DEFAULT_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")


def train_bpe_tokenizer(texts: Iterable[str], output_dir: str | Path, *, vocab_size: int,
                        special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS, min_frequency: int = 2) -> Path:
    """Trains a byte-level BPE on `texts` and saves it to `output_dir`.

    The first three special tokens are declared as BOS, EOS and PAD in `tokenizer_config.json`.

    Returns:
      The output directory.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"`vocab_size` must be at least {256 + len(special_tokens)} for byte-level BPE,"
                         f" got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    names = ("bos_token", "eos_token", "pad_token")
    config = {name: token for name, token in zip(names, special_tokens)}
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_max_length"] = 1_000_000
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out
