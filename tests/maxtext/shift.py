"""Applies MaxText's own next-token shift (`input_pipeline_utils.shift_and_refine`, what its Grain
pipelines run after packing) to raw packed rows given as JSON on stdin; prints the result as JSON.
Runs inside the MaxText test virtualenv."""

import json
import sys

import numpy as np
from maxtext.input_pipeline.input_pipeline_utils import shift_and_refine

rows = json.load(sys.stdin)
pad_id = int(sys.argv[1])
ids, seg, pos = (np.asarray(rows[k], dtype=np.int32) for k in ("input_ids", "segment_ids", "positions"))
batch = {"inputs": ids, "targets": ids.copy(), "inputs_segmentation": seg, "targets_segmentation": seg.copy(),
         "inputs_position": pos, "targets_position": pos.copy()}
print(json.dumps({k: np.asarray(v).tolist() for k, v in shift_and_refine(batch, ignored_ids=[pad_id], axis=1).items()}))
