"""Each guard of `beam_pipelines.beam_internals`: it recognises the Beam installed here, and when Beam
looks different it leaves Beam alone (the job then runs as Beam would run it)."""

from __future__ import annotations

from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory

from beam_pipelines.beam_internals import STATE_SAMPLING_PERIOD_MS, short_state_sampling, state_sampler_is_known


def _period() -> int:
    return statesampler.StateSampler("s", CounterFactory()).sampling_period_ms


def test_state_sampler_guard_knows_this_beam() -> None:
    assert state_sampler_is_known()
    with short_state_sampling():
        assert _period() == STATE_SAMPLING_PERIOD_MS
    assert _period() == statesampler.DEFAULT_SAMPLING_PERIOD_MS


def test_state_sampler_guard_leaves_an_unknown_beam_alone() -> None:
    init = statesampler.StateSampler.__init__
    saved = init.__defaults__
    init.__defaults__ = (123,)  # a Beam whose sampler takes another default
    try:
        assert not state_sampler_is_known()
        with short_state_sampling():
            assert _period() == 123
    finally:
        init.__defaults__ = saved
