"""Reads an easydata output through `tf.data` inside the TensorFlow test virtualenv and prints the
batches as JSON (last line). Also tries tensorflow-io's own Parquet reader on a shard and reports
what it could read.

Usage: python read.py OUTPUT BATCH PROCESS_INDEX PROCESS_COUNT STATE_JSON_OR_-
"""

import json
import sys

import tensorflow as tf

import easydata.reader
from easydata.reader import TokenReader

out, batch, index, count, state = sys.argv[1:6]
assert "tensorflow" in sys.modules and "apache_beam" not in sys.modules
reader = TokenReader(out, batch_size=int(batch), shuffle=True, seed=7, num_epochs=1, process_index=int(index),
                     process_count=int(count), layout="maxtext")
if state != "-":
    reader.load_state_dict(json.loads(state))
dataset = reader.as_tf_dataset()
assert isinstance(dataset, tf.data.Dataset)
batches = [{k: v.numpy().tolist() for k, v in element.items()} for element in dataset]
try:
    import tensorflow_io as tfio

    shard = easydata.reader.ParquetShardedSource(out).shard_names[0]
    tfio_rows = sum(1 for _ in tfio.IODataset.from_parquet(shard))
    tfio_note = f"read {tfio_rows} rows"
except Exception as e:  # noqa: BLE001 - reported, not hidden
    tfio_note = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
print(json.dumps({"batches": batches, "state": reader.state_dict(), "tfio_parquet": tfio_note,
                  "tf": tf.__version__, "tfio": tfio.__version__ if "tfio" in dir() else None}))
