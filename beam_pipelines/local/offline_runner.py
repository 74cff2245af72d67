"""The local runner: Beam's FnApiRunner (the engine behind DirectRunner) run directly, never Prism.

Part of the local worker machinery (`beam_pipelines.local`), the one package besides
`transforms.beam_internals` that uses Beam's runner internals (`fn_runner`, the portable runner's
`JobServiceHandle`, the SDK harness): local speed comes from them. Its contract: `OfflineDirectRunner` is a
`DirectRunner` that runs batch jobs in-process (`direct_running_mode: in_memory`) or on the forked worker
processes of `beam_pipelines.local.worker_pool` (`multi_processing`), downloads nothing, and names a worker
that died in one line. `tests/test_beam_internals.py` keeps Beam's internal modules out of every other module.
"""

from __future__ import annotations

import logging

from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import DirectRunner

from easydata.errors import EasyDataError
from transforms.beam_internals import (DropMessage, fail_bundles_of_lost_workers, lean_bundle_descriptors,
                                      short_state_sampling)
from beam_pipelines.local.worker_pool import take_prestarted, tokenizer_threads_per_worker

__all__ = ["OfflineDirectRunner"]


class OfflineDirectRunner(DirectRunner):
    """DirectRunner that runs batch pipelines on the FnApiRunner, never trying Prism.

    In `multi_processing` mode the worker processes are forked by `beam_pipelines.local.worker_pool.StandbyWorkers`
    (a server started ahead of the job when the launcher could, see `prestart`), offered to the
    FnApiRunner as an external worker pool; each runs Beam's harness with a quiet stderr
    (`beam_pipelines.local.local_worker`).
    """

    def run_pipeline(self, pipeline, options):  # noqa: D401 - Beam's signature
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle
        from apache_beam.transforms import environments
        from google.protobuf import json_format

        if options.view_as(StandardOptions).streaming:
            return super().run_pipeline(pipeline, options)
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision_info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode != "multi_processing":
            with short_state_sampling(), lean_bundle_descriptors():
                return fn_runner.FnApiRunner(provision_info=provision_info).run_pipeline(pipeline, options)
        workers = take_prestarted()
        # The FnApiRunner replaces our environment when it sees `multi_processing`, and warns when it
        # sees several workers `in_memory`: hand it the latter, with that warning filtered out.
        quiet = DropMessage("direct_running_mode")
        fn_logger = logging.getLogger(fn_runner.__name__)
        direct.direct_running_mode = "in_memory"
        fn_logger.addFilter(quiet)
        try:
            address = workers.serve(json_format.MessageToJson(encoded),
                                    tokenizer_threads=tokenizer_threads_per_worker(direct.direct_num_workers))
            environment = environments.ExternalEnvironment(address, capabilities=environments.python_sdk_capabilities())
            runner = fn_runner.FnApiRunner(default_environment=environment, provision_info=provision_info)
            with fail_bundles_of_lost_workers(), lean_bundle_descriptors():
                return runner.run_pipeline(pipeline, options)
        except Exception as e:
            failures = [] if isinstance(e, EasyDataError) else workers.failures()
            if failures:
                raise EasyDataError(f"a local worker process ended during the job ({'; '.join(failures)}; a"
                                    " SIGKILL is often the kernel's out-of-memory killer): the output was not"
                                    " committed; run again, with --resume to keep the tokenized input") from e
            raise
        finally:
            direct.direct_running_mode = "multi_processing"
            fn_logger.removeFilter(quiet)
            workers.close()
