"""EasyData's overview.md, block by block, as written (only `easydel.data` -> `easydata`; bucket
URLs -> local directories; hub ids from a real offline Hugging Face cache): see tests/easydata_docs.py."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tests.easydata_docs import DocsWorld, code_blocks

PAGE = "overview"
#: Blocks that need EasyDeL itself (its trainers): they cannot run without `easydel`.
NEEDS_EASYDEL = {4, 5}


@pytest.fixture(scope="module")
def world(tmp_path_factory, mistral_tokenizer_dir) -> DocsWorld:
    return DocsWorld(tmp_path_factory.mktemp("overview"), mistral_tokenizer_dir)


def test_every_block_is_covered() -> None:
    assert len(code_blocks(PAGE)) == 6
    assert all("import easydel as ed" in code_blocks(PAGE)[i] for i in NEEDS_EASYDEL)


def test_sources_local_cloud_and_hub(world) -> None:
    ns, _ = world.run(PAGE, 0)
    with world.inside():  # sources are lazy: they read in the page's environment (offline hub cache)
        assert ns["source"].num_shards() == 1  # the Hub dataset: its one train file, from the cache
        rows = list(ns["source"].open_shard(ns["source"].shard_names[0]))
    assert len(rows) == 200 and set(rows[0]) == {"text", "id"}


def test_block_mixture_interleave_gives_the_weights(world) -> None:
    names = ("code", "text", "math")
    given = {n: [{"text": f"{n} {i}", "src": n} for i in range(1000)] for n in names}
    ns, _ = world.run(PAGE, 1, {f"{n}_ds": rows for n, rows in given.items()})
    first = [row["src"] for _, row in zip(range(1000), ns["mixed"])]
    counts = collections.Counter(first)
    # exact shares from the first rows on (EasyData samples blocks); counted in rows: these rows have no tokens
    assert abs(counts["code"] - 400) <= 1 and abs(counts["text"] - 500) <= 1 and abs(counts["math"] - 100) <= 1


def test_weight_scheduler_interpolates(world) -> None:
    ns, _ = world.run(PAGE, 2)
    scheduler = ns["scheduler"]
    assert scheduler.get_weights(0) == pytest.approx({"easy": 0.9, "hard": 0.1})
    assert scheduler.get_weights(25000) == pytest.approx({"easy": 0.5, "hard": 0.5})
    assert scheduler.get_weights(90000) == pytest.approx({"easy": 0.1, "hard": 0.9})


@pytest.mark.slow
def test_pipeline_api_yields_packed_training_batches(world) -> None:
    ns, _ = world.run(PAGE, 3)  # the block uses PackStageConfig without importing it (the page's slip)
    batches = ns["batches"]
    assert batches and all(b["input_ids"].shape == (8, 2048) for b in batches)
    segments = np.concatenate([b["segment_ids"] for b in batches])
    assert segments.min() == 0 and segments[:, 0].min() == 1  # segment ids from 1; 0 is padding
    # a second pipeline with the same config reuses the prepared output (the fingerprint-keyed cache)
    import os

    cache = os.path.join(world.root, "easydata-cache")
    before = sorted(os.listdir(cache))
    again, _ = world.run(PAGE, 3)
    assert sorted(os.listdir(cache)) == before
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(batches, again["batches"]))
