"""Where easydata keeps what it builds once per machine: `cache_root()` (`EASYDATA_CACHE`, else
`~/.cache/easydata-beam`): the embedded default job's sample corpus and tokenizer, engine verdicts, the Python
API's prepared outputs. A leaf module: every layer may ask for it."""

from __future__ import annotations

import os
from pathlib import Path

from easydata.errors import EnvironmentFailure

__all__ = ["cache_root", "make_cache_dir"]


def cache_root() -> Path:
    """The cache directory (not created here)."""
    return Path(os.environ.get("EASYDATA_CACHE", Path.home() / ".cache" / "easydata-beam"))


def make_cache_dir(path: Path) -> Path:
    """Creates `path` (a directory in the cache) with its parents; returns it.

    Raises:
      EnvironmentFailure: it cannot be made (a file in the way, no permission): one line naming the path
        and `EASYDATA_CACHE`, where a traceback was.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EnvironmentFailure(f"the cache directory '{path}' cannot be made ({e.strerror or e}): set"
                                 " EASYDATA_CACHE to a directory this user can write") from None
    return path
