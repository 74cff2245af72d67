"""Algorithms on token rows: packing, mixing, the deterministic shuffle and shard plan, holdout splits."""
