"""Running a local batch job without the optional libraries it never uses.

`import apache_beam` also imports every optional library it finds installed for its connectors and
type adapters: pandas (its DataFrame batch types), google-cloud-pubsub (its Pub/Sub connector), boto3
(its S3 file system), pymongo and bson (its MongoDB connector); and pyarrow imports pandas, when
installed, the first time `pa.array` is given a Python list. A local batch job uses none of them: it
reads and writes through fsspec and pyarrow, and Pub/Sub only in the streaming pipeline. With the
project's `dev` extras installed (the quickstart's install) they are about half of Beam's import
(`python -X importtime`; figures: docs/performance.md#figures-behind-design-choices), paid by the `easydata` command and by the
local worker server, and pandas more in each worker at its first `pa.array`: all on a job's start-up
path. `without_unused_libraries` makes them look absent (as Beam and pyarrow cope with
when they are not installed) for the processes that run one local batch job: the `easydata run`
command while it runs the job, and the local worker server with the workers it forks. Beam and
pyarrow remember them absent after the block, so a process that goes on to other work (a streaming
job needs Beam's Pub/Sub connector; a Python API user may run one after a batch job) does not use
this: `easydata.api` imports Beam plainly.

This module imports no Beam.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from typing import Any, Iterator, Sequence

__all__ = ["UNUSED_IN_LOCAL_BATCH_JOBS", "without_unused_libraries"]

#: Optional libraries Beam imports when installed, that no step of a local batch job uses.
UNUSED_IN_LOCAL_BATCH_JOBS = ("pandas", "google.cloud.pubsub", "boto3", "pymongo", "bson")


class _Absent(importlib.abc.MetaPathFinder):
    """A finder that reports the named top-level modules (and their submodules) as not installed."""

    def __init__(self, names: Sequence[str]):
        self._names = tuple(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if any(fullname == name or fullname.startswith(name + ".") for name in self._names):
            raise ModuleNotFoundError(f"No module named {fullname!r} (not used by a local batch job)", name=fullname)
        return None


@contextlib.contextmanager
def without_unused_libraries(names: Sequence[str] = UNUSED_IN_LOCAL_BATCH_JOBS) -> Iterator[None]:
    """Within the block, importing any of `names` not imported yet raises ModuleNotFoundError, as if it
    were not installed; after the block they import again (but libraries that looked for them
    meanwhile keep them absent).

    A finder first on `sys.meta_path`, not a `None` entry in `sys.modules`: Cython-compiled imports
    (pyarrow's) take such an entry for the module itself.
    """
    finder = _Absent([name for name in names if name not in sys.modules])
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
