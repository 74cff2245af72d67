"""Where easydata keeps what it builds once per machine: `cache_root()` (`EASYDATA_CACHE`, else
`~/.cache/easydata-beam`): the embedded default job's sample corpus and tokenizer, engine verdicts, the Python
API's prepared outputs. A leaf module: every layer may ask for it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """The cache directory (not created here)."""
    return Path(os.environ.get("EASYDATA_CACHE", Path.home() / ".cache" / "easydata-beam"))
