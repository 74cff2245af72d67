"""Runs MaxText's own Grain input pipeline (`make_grain_train_iterator`) on an easydata output and
prints what it produced, as JSON on the last line. Runs inside the MaxText test virtualenv
(Python 3.12, the real `maxtext` package), not in easydata's environment.

Usage: python batches.py FILES FILE_TYPE COLUMN MAX_TARGET_LENGTH PER_DEVICE_BATCH [--resume-at=K] [KEY=VALUE ...]

With `--resume-at=K` (and Grain's shuffle on: `enable_data_shuffling=True`) the last line is
`{"epoch": [...], "resumed": [...], "unshuffled": [...]}`: the whole shuffled epoch, what a second
iterator yields after taking the first iterator's Grain state after K batches (`get_state` / `set_state`
on the local iterator: what MaxText's checkpointing saves and restores), and the epoch without shuffling.
"""

import json
import os
import sys

import numpy as np
from maxtext.configs import pyconfig
from maxtext.input_pipeline.grain_data_processing import make_grain_train_iterator
from maxtext.utils import maxtext_utils

files, file_type, column, length, batch = sys.argv[1:6]
resume_at = [int(a.split("=", 1)[1]) for a in sys.argv[6:] if a.startswith("--resume-at=")]
overrides = [a for a in sys.argv[6:] if not a.startswith("--resume-at=")]
shuffle = "enable_data_shuffling=True" in overrides
overrides = [a for a in overrides if not a.startswith("enable_data_shuffling=")]
base = os.path.join(os.path.dirname(pyconfig.__file__), "base.yml")


def make_config(shuffled: bool):
    return pyconfig.initialize(["", base, "run_name=easydata", "dataset_type=grain", f"grain_file_type={file_type}",
                                f"grain_train_files={files}", "tokenize_train_data=False",
                                f"train_data_columns=['{column}']", f"max_target_length={length}",
                                f"per_device_batch_size={batch}", "enable_checkpointing=False",
                                "grain_worker_count=0", f"enable_data_shuffling={shuffled}", "num_epoch=1",
                                "skip_jax_distributed_system=True",
                                f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/maxtext-out", *overrides])


config = make_config(shuffle)
mesh = maxtext_utils.get_mesh_from_config(config)


def take(iterator, limit: int = 10_000) -> list[dict]:
    """Up to `limit` batches (one epoch ends with StopIteration)."""
    batches = []
    for _ in range(limit):
        try:
            batch_ = next(iterator)
        except StopIteration:
            break
        batches.append({k: np.asarray(v).tolist() for k, v in batch_.items()})
    return batches


epoch = take(make_grain_train_iterator(config, mesh, [0]))
if resume_at:
    first = make_grain_train_iterator(config, mesh, [0])
    take(first, resume_at[0])
    state = first.local_iterator.get_state()
    second = make_grain_train_iterator(config, mesh, [0])
    second.local_iterator.set_state(json.loads(json.dumps(state)))  # as a checkpoint stores it
    resumed = take(second)
    unshuffled = take(make_grain_train_iterator(make_config(False), mesh, [0])) if shuffle else epoch
    print(json.dumps({"epoch": epoch, "resumed": resumed, "unshuffled": unshuffled}))
else:
    print(json.dumps(epoch))
sys.stdout.flush()
os._exit(0)  # MaxText's iterators raise while the interpreter tears down; the result is out
