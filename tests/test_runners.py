"""Runner selection: offline local defaults, DirectRunner without Prism, other runners passed through."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, WorkerOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.runners import OfflineDirectRunner, make_runner_and_options


def test_default_is_one_in_process_worker():
    runner, options = make_runner_and_options([])
    direct = options.view_as(DirectOptions)
    assert isinstance(runner, OfflineDirectRunner)
    assert (direct.direct_num_workers, direct.direct_running_mode) == (1, "in_memory")
    assert options.view_as(WorkerOptions).default_sdk_harness_log_level == "WARNING"


def test_several_workers_are_processes_unless_told_otherwise():
    _, options = make_runner_and_options(["--direct_num_workers=2"])
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    _, options = make_runner_and_options(["--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    assert options.view_as(DirectOptions).direct_running_mode == "multi_threading"


def test_direct_runner_name_maps_to_offline_runner_and_others_pass_through():
    runner, _ = make_runner_and_options(["--runner=DirectRunner"])
    assert isinstance(runner, OfflineDirectRunner)
    runner, options = make_runner_and_options(["--runner=DataflowRunner", "--project=p", "--region=r"])
    assert runner == "DataflowRunner"
    assert options.get_all_options()["project"] == "p"


def test_offline_runner_runs_a_pipeline_in_two_processes():
    runner, options = make_runner_and_options(["--direct_num_workers=2"])
    with beam.Pipeline(runner=runner, options=options) as p:
        squares = p | beam.Create(range(20)) | beam.Reshuffle() | beam.Map(lambda x: x * x)
        assert_that(squares, equal_to([x * x for x in range(20)]))


def test_unknown_flags_are_found_with_suggestions():
    from beam_pipelines.runners import unknown_beam_flags

    assert unknown_beam_flags(["--runner=DirectRunner", "--direct_num_workers=2", "--runer=DataflowRunner",
                               "--my_custom_flag", "positional"]) == [("--runer", "--runner"),
                                                                      ("--my_custom_flag", None)]


def test_short_state_sampling_applies_inside_the_block_only():
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory

    from beam_pipelines.runners import STATE_SAMPLING_PERIOD_MS, short_state_sampling

    with short_state_sampling():
        assert statesampler.StateSampler("s", CounterFactory()).sampling_period_ms == STATE_SAMPLING_PERIOD_MS
    after = statesampler.StateSampler("s", CounterFactory()).sampling_period_ms
    assert after == statesampler.DEFAULT_SAMPLING_PERIOD_MS
