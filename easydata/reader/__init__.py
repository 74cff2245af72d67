"""The companion reader: feeds easydata outputs to JAX training loops.

    from easydata.reader import TokenReader
    reader = TokenReader("gs://bucket/out", batch_size=256, shuffle=True, seed=0)
    for batch in reader.as_jax(mesh, PartitionSpec("data")): ...

`MixedReader` mixes several `TokenReader`s by weights that change with the training step
(`WeightSchedulePoint`s; `WeightSchedule` computes them). `WindowReader` (`TokenReader.random_windows`)
samples nanoGPT-style windows from `bin` outputs.

Importing this package imports neither Apache Beam nor JAX.
"""

from easydata.config import WeightSchedulePoint
from easydata.reader.compat import ArrowShardedSource, AsyncDataLoader, ParquetShardedSource
from easydata.reader.follow import FollowReader
from easydata.reader.grain_source import GrainSource
from easydata.reader.layouts import LAYOUTS
from easydata.reader.mixed_reader import MixedReader
from easydata.reader.schedule import WeightSchedule
from easydata.reader.token_reader import TokenReader
from easydata.reader.bin_reader import WindowReader
from easydata.reader import record_reader  # noqa: F401  (registers the tfrecord / arrayrecord blocks)

__all__ = ["TokenReader", "WindowReader", "FollowReader", "MixedReader", "WeightSchedulePoint", "WeightSchedule", "GrainSource",
           "ParquetShardedSource", "ArrowShardedSource", "AsyncDataLoader", "LAYOUTS"]
