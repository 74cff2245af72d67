"""`CommitOutput`: the single final step that turns staged shards into a complete output.

It waits for every shard, counter and dead-letter file (as side inputs), then calls
`easydata.run.finalize.finalize_output`, which moves the staged files into place and writes
`manifest.json` last. Because it runs inside the pipeline, a job launched without waiting (e.g. a
Dataflow Flex Template) still commits its own output.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import apache_beam as beam

from easydata.config import PipelineConfig
from easydata.run.counters import RunCounters
from easydata.run.finalize import finalize_output
from easydata.run.progress import report_stage
from easydata.run.run_plan import RunPlan
from transforms.failures import classified_failures

__all__ = ["CommitOutput"]


@classified_failures
class _CommitFn(beam.DoFn):
    def __init__(self, config: PipelineConfig, plan: RunPlan, started_at: float, progress_dir: Optional[str]):
        self._config, self._plan, self._started_at, self._progress_dir = config, plan, started_at, progress_dir

    def process(self, _: Any, shards: list, counters: RunCounters, rejected: list, mix_plan: list
                ) -> Iterator[dict[str, Any]]:
        report_stage(self._progress_dir, committing=1)
        yield finalize_output(self._config, self._plan, shards, counters, rejected, self._started_at,
                              mix_plan=mix_plan[0] if mix_plan else None)


class CommitOutput(beam.PTransform):
    """Commits the run: input is a dict of PCollections `shards`, `counters` (one `RunCounters`, every
    step's summed: `transforms.counters.SumCounters`), `rejected` (and `mix_plan` for a mixed run).

    Returns a PCollection holding the manifest written.
    """

    def __init__(self, *, config: PipelineConfig, plan: RunPlan, started_at: float,
                 progress_dir: Optional[str] = None):
        super().__init__()
        # the graph carries the plan without its per-file parts: the commit reads the splits from staging
        self._config, self._plan = config, plan.without_inputs()
        self._started_at, self._progress_dir = started_at, progress_dir

    def expand(self, inputs: dict[str, beam.PCollection]) -> beam.PCollection:
        pipeline = inputs["shards"].pipeline
        mix_plan = inputs.get("mix_plan") or (pipeline | "NoMix" >> beam.Create([]))
        return (pipeline
                | "Once" >> beam.Create([None])
                | "Commit" >> beam.ParDo(_CommitFn(self._config, self._plan, self._started_at, self._progress_dir),
                                         shards=beam.pvalue.AsList(inputs["shards"]),
                                         counters=beam.pvalue.AsSingleton(inputs["counters"]),
                                         rejected=beam.pvalue.AsList(inputs["rejected"]),
                                         mix_plan=beam.pvalue.AsList(mix_plan)))
