"""EasyData-compatible names the reader re-exports (`from easydata.reader import ParquetShardedSource`);
they live in `easydata.compat` (no Apache Beam import there either)."""

from easydata.compat.loader import AsyncDataLoader
from easydata.compat.sources import ArrowShardedSource, ParquetShardedSource

__all__ = ["ParquetShardedSource", "ArrowShardedSource", "AsyncDataLoader"]
