"""A dask worker preload for `tests/test_dask_runner.py`: the worker takes longer to close than the nanny waits
(4 s), as a worker process of a large job does on a busy machine."""

import time


def dask_teardown(worker) -> None:  # noqa: ANN001 - dask's preload hook
    time.sleep(6)
