"""Runs MaxText's own Grain input pipeline (`make_grain_train_iterator`) on an easydata output and
prints what it produced, as JSON on the last line. Runs inside the MaxText test virtualenv
(Python 3.12, the real `maxtext` package), not in easydata's environment.

Usage: python batches.py FILES FILE_TYPE COLUMN MAX_TARGET_LENGTH PER_DEVICE_BATCH [KEY=VALUE ...]
"""

import json
import os
import sys

import numpy as np
from maxtext.configs import pyconfig
from maxtext.input_pipeline.grain_data_processing import make_grain_train_iterator
from maxtext.utils import maxtext_utils

files, file_type, column, length, batch = sys.argv[1:6]
base = os.path.join(os.path.dirname(pyconfig.__file__), "base.yml")
config = pyconfig.initialize(["", base, "run_name=easydata", "dataset_type=grain", f"grain_file_type={file_type}",
                              f"grain_train_files={files}", "tokenize_train_data=False",
                              f"train_data_columns=['{column}']", f"max_target_length={length}",
                              f"per_device_batch_size={batch}", "enable_checkpointing=False", "grain_worker_count=0",
                              "enable_data_shuffling=False", "num_epoch=1", "skip_jax_distributed_system=True",
                              f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/maxtext-out",
                              *sys.argv[6:]])
iterator = make_grain_train_iterator(config, maxtext_utils.get_mesh_from_config(config), [0])
batches = []
for _ in range(10_000):  # one epoch: the iterator ends with StopIteration
    try:
        batch_ = next(iterator)
    except StopIteration:
        break
    batches.append({k: np.asarray(v).tolist() for k, v in batch_.items()})
print(json.dumps(batches))
sys.stdout.flush()
os._exit(0)  # MaxText's iterators raise while the interpreter tears down; the result is out
