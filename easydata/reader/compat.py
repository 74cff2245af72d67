"""EasyData-compatible names the reader exports (`from easydata.reader import ParquetShardedSource`): the
`ShardedDataSource` family (`easydata.reader.sharded_sources`) and `AsyncDataLoader`
(`easydata.reader.async_loader`); `easydata.compat` re-exports them under EasyData's module paths."""

from easydata.reader.async_loader import AsyncDataLoader
from easydata.reader.sharded_sources import ArrowShardedSource, ParquetShardedSource

__all__ = ["ParquetShardedSource", "ArrowShardedSource", "AsyncDataLoader"]
