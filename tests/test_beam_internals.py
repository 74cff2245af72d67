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


def test_control_connection_guard(monkeypatch) -> None:
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    from beam_pipelines.beam_internals import control_connection_is_known, fail_bundles_of_lost_workers

    connection = worker_handlers.ControlConnection
    original = connection.__dict__["_read"]
    assert control_connection_is_known()
    with fail_bundles_of_lost_workers():
        assert connection.__dict__["_read"] is not original  # hooked while the job runs
    assert connection.__dict__["_read"] is original
    monkeypatch.delattr(worker_handlers.ControlFuture, "abort")  # a Beam whose futures cannot abort
    assert not control_connection_is_known()
    with fail_bundles_of_lost_workers():
        assert connection.__dict__["_read"] is original  # left alone


def test_flag_names_guard(monkeypatch) -> None:
    from apache_beam.options import pipeline_options

    from beam_pipelines.beam_internals import beam_flag_names
    from beam_pipelines.runners import unknown_beam_flags

    names = beam_flag_names()
    assert {"runner", "direct_num_workers", "temp_location"} <= names
    assert unknown_beam_flags(["--runer=DirectRunner"]) == [("--runer", "--runner")]
    class OtherParser:  # a Beam whose private parser no longer keeps `_actions`
        def __init__(self, **options: object) -> None:
            pass

    with monkeypatch.context() as patched:
        patched.setattr(pipeline_options, "_BeamArgumentParser", OtherParser)
        assert beam_flag_names() is None
    import beam_pipelines.runners as runners

    monkeypatch.setattr(runners, "beam_flag_names", lambda: None)
    assert unknown_beam_flags(["--runer=DirectRunner"]) == []  # then no flag is called unknown
