"""Runner selection: offline local defaults, DirectRunner without Prism, other runners passed through."""

from __future__ import annotations

import json
import os
import pickle

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DebugOptions, DirectOptions, PipelineOptions, WorkerOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.runners import LocalRunOptions, OfflineDirectRunner, make_runner_and_options
from beam_pipelines.local.worker_pool import default_worker_count, local_worker_count, tokenizer_threads_per_worker
from easydata.run.machine import usable_cores


def test_default_is_one_worker_process_per_usable_core():
    runner, options = make_runner_and_options([])
    direct = options.view_as(DirectOptions)
    workers = default_worker_count()
    assert isinstance(runner, OfflineDirectRunner)
    assert 1 <= workers <= usable_cores()
    assert (direct.direct_num_workers, direct.direct_running_mode) == \
        (workers, "multi_processing" if workers > 1 else "in_memory")
    assert local_worker_count([]) == (workers if workers > 1 else 0), "the launcher prestarts the same workers"
    assert options.view_as(WorkerOptions).default_sdk_harness_log_level == "WARNING"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_one_usable_core_runs_in_process():
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # as under `taskset -c N`
    try:
        assert usable_cores() == default_worker_count() == 1
        _, options = make_runner_and_options([])
        direct = options.view_as(DirectOptions)
        assert (direct.direct_num_workers, direct.direct_running_mode) == (1, "in_memory")
        assert local_worker_count([]) == 0
    finally:
        os.sched_setaffinity(0, allowed)


def test_explicit_worker_counts():
    for flags, expected in ((["--direct_num_workers=1"], (1, "in_memory")),
                            (["--direct_num_workers=3"], (3, "multi_processing")),
                            (["--direct_num_workers=0"], (usable_cores(),
                                                         "multi_processing" if usable_cores() > 1 else "in_memory"))):
        _, options = make_runner_and_options(flags)
        direct = options.view_as(DirectOptions)
        assert (direct.direct_num_workers, direct.direct_running_mode) == expected, flags
        assert local_worker_count(flags) == (expected[0] if expected[1] == "multi_processing" else 0), flags


def test_tokenizer_threads_share_the_usable_cores():
    cores = usable_cores()
    assert tokenizer_threads_per_worker(1) == cores
    assert tokenizer_threads_per_worker(cores) == 1
    assert tokenizer_threads_per_worker(4 * cores) == 1


@pytest.mark.slow
@pytest.mark.skipif(default_worker_count() < 2 or "RAYON_NUM_THREADS" in os.environ
                    or "FASTOKENS_BPE_THREADS" in os.environ,
                    reason="needs 2 usable cores and no user setting of RAYON_NUM_THREADS or FASTOKENS_BPE_THREADS")
def test_default_run_uses_worker_processes_with_one_tokenizer_thread_each(tmp_path):
    """The default local job runs in several processes other than this one, each tokenizer sized to
    its share of the cores (the variable is read by the tokenizer library's thread pool)."""
    def record(x: int, out: str = str(tmp_path)) -> None:  # workers share this machine's files
        with open(os.path.join(out, f"{x}.json"), "w") as f:
            json.dump([os.getpid(), os.environ.get("RAYON_NUM_THREADS"), os.environ.get("FASTOKENS_BPE_THREADS")], f)

    runner, options = make_runner_and_options([])
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = p | beam.Create(range(8)) | beam.Reshuffle() | beam.Map(record)
    seen = [json.loads(f.read_text()) for f in sorted(tmp_path.glob("*.json"))]
    assert len(seen) == 8
    assert {threads for _, threads, _ in seen} == {str(tokenizer_threads_per_worker(default_worker_count()))}
    assert {threads for _, _, threads in seen} == {str(tokenizer_threads_per_worker(default_worker_count()))}
    assert os.getpid() not in {pid for pid, _, _ in seen}


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


def test_local_options_make_each_view_once_and_behave_like_beams():
    beam_args = ["--direct_num_workers=2", "--experiments=a", "--runner=DirectRunner"]
    _, options = make_runner_and_options(beam_args)
    assert isinstance(options, LocalRunOptions)
    assert options.view_as(DirectOptions) is options.view_as(DirectOptions)
    # a value set through one view is seen through the options, other views and Beam's own views
    options.view_as(DebugOptions).add_experiment("b")
    options.view_as(WorkerOptions).default_sdk_harness_log_level = "ERROR"
    plain = PipelineOptions.view_as(options, DebugOptions)  # Beam's view_as: a new view each call
    assert plain.experiments == ["a", "b"]
    assert PipelineOptions.view_as(options, WorkerOptions).default_sdk_harness_log_level == "ERROR"
    assert options.get_all_options() == PipelineOptions.get_all_options(options)
    copy = pickle.loads(pickle.dumps(options))  # the views stay behind; the values travel
    assert "_views" not in copy.__dict__
    assert copy.view_as(DebugOptions).experiments == ["a", "b"]
    assert copy.get_all_options() == options.get_all_options()
    _, remote = make_runner_and_options(["--runner=DataflowRunner", "--project=p", "--region=r"])
    assert type(remote) is PipelineOptions


@pytest.mark.slow
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

    from transforms.beam_internals import STATE_SAMPLING_PERIOD_MS, short_state_sampling

    with short_state_sampling():
        assert statesampler.StateSampler("s", CounterFactory()).sampling_period_ms == STATE_SAMPLING_PERIOD_MS
    after = statesampler.StateSampler("s", CounterFactory()).sampling_period_ms
    assert after == statesampler.DEFAULT_SAMPLING_PERIOD_MS


def test_a_pipeline_built_and_not_run_leaves_no_scratch_directory(tmp_path):
    """Beam removes a pipeline's `beam-pipeline-temp*` directory only at the end of `run()`; a job built and not
    run (`build_batch_job`, offline graphs) left one per call. `new_pipeline`'s goes with the pipeline object,
    and at the latest when the interpreter exits."""
    import gc
    import subprocess
    import sys

    from beam_pipelines.runners import new_pipeline

    runner, options = make_runner_and_options([])
    pipeline = new_pipeline(runner, options)
    scratch = pipeline.local_tempdir
    assert os.path.isdir(scratch)
    del pipeline
    gc.collect()
    assert not os.path.exists(scratch)

    held = ("import sys\nfrom beam_pipelines.runners import make_runner_and_options, new_pipeline\n"
            "KEPT = new_pipeline(*make_runner_and_options([]))\nprint(KEPT.local_tempdir)\n")
    done = subprocess.run([sys.executable, "-c", held], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    kept = done.stdout.strip().splitlines()[-1]
    assert kept.startswith(str(tmp_path)) and not os.path.exists(kept)
    assert not list(tmp_path.glob("beam-pipeline-temp*"))
