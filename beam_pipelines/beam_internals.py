"""Where this package touches Apache Beam's private internals, each behind a guard.

Every function here changes something Beam does not offer as an option, for local-run speed or
clean failure, and first checks that Beam still looks as expected; when it does not (a newer
Beam), it leaves Beam alone and the job runs as Beam would run it (slower, never wrong). Each guard
has a test (`tests/test_beam_internals.py`).

Moved here so far: the state sampler's sleep (`short_state_sampling`). Still elsewhere, to move
next: the worker connection hooks (`beam_pipelines.runners.fail_bundles_of_lost_workers`,
`beam_pipelines.worker_pool`), the argument parser's private class (`runners`), the lean-import
list (`lean_import`) and Dask's `_Create` override (`dask_runner`).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["STATE_SAMPLING_PERIOD_MS", "short_state_sampling", "state_sampler_is_known"]


#: Longest sleep of Beam's per-bundle state sampler thread in local runs (Beam's default: 200 ms).
STATE_SAMPLING_PERIOD_MS = 10


@contextlib.contextmanager
def short_state_sampling(period_ms: int = STATE_SAMPLING_PERIOD_MS) -> Iterator[None]:
    """Makes bundles end without waiting for Beam's state sampler, while the block runs.

    Each bundle starts a thread that samples which step is running, sleeping up to
    `DEFAULT_SAMPLING_PERIOD_MS` (200 ms) between samples, and ending the bundle joins that thread:
    a local job lost about a second, idle, over its dozen bundles (py-spy, docs/performance.md).
    The sampler sleeps without the GIL, so a shorter period costs nothing measurable. A Beam whose
    sampler no longer looks like this is left alone.
    """
    from apache_beam.runners.worker import statesampler

    if not state_sampler_is_known():
        yield
        return
    init = statesampler.StateSampler.__init__
    defaults = init.__defaults__
    init.__defaults__ = (period_ms,)
    try:
        yield
    finally:
        init.__defaults__ = defaults


def state_sampler_is_known() -> bool:
    """The guard: Beam's `StateSampler.__init__` still takes the sampling period as its one default."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    period = getattr(statesampler, "DEFAULT_SAMPLING_PERIOD_MS", None)
    return period is not None and getattr(init, "__defaults__", None) in ((period,), (STATE_SAMPLING_PERIOD_MS,))
