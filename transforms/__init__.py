"""Beam PTransforms of easydata-beam: thin wrappers over the pure `easydata` core.

- `ReadDocuments`: input splits -> document batches (+ dead letters, counters); a resumed run's done units ->
  their checkpointed token rows
- `Tokenize`: document batches -> chat records rendered -> token rows (with `loss_mask` for chat; + dead letters)
- `WeightedMix`: several datasets' token rows -> one stream mixed by token share
- `SplitRows`: token rows -> one stream per train / validation / ... split
- `Pack`: token rows -> fixed-length packed rows, staged as sorted groups
- `SortGroups`: token rows -> hash groups staged sorted (packing stages its groups itself)
- `ShuffleRows` (`transforms.shuffle`): token rows -> their hash groups, compactly encoded and counted
- `WriteShards`: sorted groups -> shuffled, evenly sized staged shards
- `CommitOutput`: staged shards -> committed output with `manifest.json`

`transforms.coders` gives Arrow record batches and document batches their own Beam coders.
"""

from transforms.coders import DocumentBatchCoder, RecordBatchCoder  # registers them with Beam
from transforms.mix import MIX_PLAN_TAG, MIXED_NAME, WeightedMix
from transforms.commit import CommitOutput
from transforms.pack import Pack
from transforms.counters import STATS_TAG, SumCounters
from transforms.read import REJECTED_TAG, ReadDocuments
from transforms.split import SplitRows
from transforms.tokenize import Tokenize
from transforms.write import SortGroups, WriteShards

__all__ = ["ReadDocuments", "Tokenize", "Pack", "WriteShards", "CommitOutput", "STATS_TAG", "REJECTED_TAG",
           "WeightedMix", "MIX_PLAN_TAG", "MIXED_NAME", "SplitRows", "SortGroups",
           "SumCounters", "RecordBatchCoder", "DocumentBatchCoder"]
