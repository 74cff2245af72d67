"""Entry point of local Beam worker processes: Beam's SDK harness with quiet stderr.

The harness logs every gRPC channel at INFO on its own stderr before it has read any option, and
Beam logs warnings about optional GCP libraries at import; this wrapper lets only errors through to
stderr (worker log records still travel to the launching process, whose logging configuration
decides what is shown). Logging is set up before Beam is imported. Bundles end without waiting for
Beam's state sampler (`beam_pipelines.runners.short_state_sampling`).
"""

import logging
import sys


def main() -> None:
    handler = logging.StreamHandler()
    handler.setLevel(logging.ERROR)
    logging.basicConfig(handlers=[handler], format="%(levelname)s:%(name)s:%(message)s")
    from apache_beam.runners.worker import sdk_worker_main

    from beam_pipelines.runners import short_state_sampling

    with short_state_sampling():
        sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
