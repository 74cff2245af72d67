"""EasyData's `ShardedDataSource` family under its EasyData module path; it lives in
`easydata.reader.sharded_sources` (the reader exports `ParquetShardedSource` and `ArrowShardedSource`)."""

from easydata.reader.sharded_sources import (ArrowShardedSource, CsvShardedSource, FileShardedSource,
                                             FilesBackedSource, HFDatasetShardedSource, HuggingFaceShardedSource,
                                             JsonShardedSource, OutputShardedSource, ParquetShardedSource,
                                             TextShardedSource, source_for_files)

__all__ = ["FileShardedSource", "ParquetShardedSource", "ArrowShardedSource", "JsonShardedSource",
           "CsvShardedSource", "TextShardedSource", "OutputShardedSource", "FilesBackedSource", "HuggingFaceShardedSource",
           "HFDatasetShardedSource", "source_for_files"]
