"""Entry point of local Beam worker processes: Beam's SDK harness, started ahead of its job, quiet.

Started by `beam_pipelines.worker_pool.StandbyWorkers` before the job needs it, the process imports
Beam's harness and the libraries the job's steps use, then waits for one line on stdin: a JSON
object of the environment variables Beam's harness reads (control and logging endpoints, worker
id, pipeline options). It then runs the harness until the runner closes it. End-of-file instead of
that line (the pool was closed, or its launcher ended) ends the process quietly.

The harness logs every gRPC channel at INFO on its own stderr before it has read any option, and
Beam logs warnings about optional GCP libraries at import; only errors reach stderr here (worker log
records still travel to the launching process, whose logging configuration decides what is shown).
Logging is set up before Beam is imported. Bundles end without waiting for Beam's state sampler
(`beam_pipelines.runners.short_state_sampling`).

Once the harness has shut down (every DoFn torn down), the process flushes its log stream and ends
without interpreter teardown: freeing every object of a process holding Beam, pyarrow and a
tokenizer took about a second, and the job's runner waited for it. Beam's log handler can wait for
ever for the log service to end its stream (seen after a 400 MB job: both workers blocked in
`FnApiLogRecordHandler.close` after the output was committed), so that flush is given
`LOG_CLOSE_SECONDS`.
"""

import json
import logging
import os
import sys
import threading

#: How long a finished worker waits for its log stream to close before it exits anyway.
LOG_CLOSE_SECONDS = 2.0


def main() -> None:
    handler = logging.StreamHandler()
    handler.setLevel(logging.ERROR)
    logging.basicConfig(handlers=[handler], format="%(levelname)s:%(name)s:%(message)s")
    from apache_beam.runners.worker import sdk_worker_main

    import easydata.tokenizer  # noqa: F401 - the job's steps need these: import them while waiting
    import pyarrow.parquet  # noqa: F401
    import transforms  # noqa: F401
    from beam_pipelines.runners import short_state_sampling

    line = sys.stdin.readline()
    if not line.strip():
        return
    os.environ.update(json.loads(line))
    log_handler, harness, _ = sdk_worker_main.create_harness(os.environ)
    with short_state_sampling():
        harness.run()
    if log_handler is not None:  # flush the log stream, but do not wait on it for ever
        closing = threading.Thread(target=log_handler.close, daemon=True)
        closing.start()
        closing.join(LOG_CLOSE_SECONDS)
    handler.flush()  # not logging.shutdown(): it would close Beam's log handler again, waiting
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
