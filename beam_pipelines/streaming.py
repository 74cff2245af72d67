"""The streaming pipeline: Pub/Sub -> windowed chat/tokenize/pack -> shards committed window by window.

`easydata run CONFIG --streaming` with datasets whose source is `pubsub_subscription`
(`projects/P/subscriptions/S`; `PUBSUB_EMULATOR_HOST` is honoured by the Pub/Sub client). Locally it
runs on Beam's streaming-capable `BundleBasedDirectRunner` (never Prism, which would download a
binary); `--runner=DataflowRunner` runs it on Dataflow. It runs until cancelled: Ctrl-C or SIGTERM
cancels the job; committed windows stay committed, an open window is abandoned (its messages were
not acknowledged... by a runner that acknowledges on commit; the local runner acknowledges on read).
"""

from __future__ import annotations

import re
import signal
import sys
from typing import Any, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult

from easydata.config import PipelineConfig
from easydata.errors import ConfigError, EasyDataError, OutputError
from easydata.io.filesystems import get_fs, join
from easydata.run.manifest import MANIFEST_NAME, read_manifest
from easydata.run.output import new_run_id, prepare_output, staging_dir
from easydata.ops.pack_stage import resolve_pad_id
from easydata.run.run_plan import load_chat_template
from easydata.text.tokenizer import load_tokenizer
from beam_pipelines.runners import is_dask_runner, new_pipeline
from transforms.stream import CommitWindows, ProcessWindow, WindowMessages

__all__ = ["build_streaming_pipeline", "build_streaming_job", "run_streaming", "PUBSUB_RUNNERS"]

_SUBSCRIPTION = re.compile(r"projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/subscriptions/[A-Za-z][-A-Za-z0-9_.~+%]{2,254}")


def _base_manifest(config: PipelineConfig) -> tuple[dict[str, Any], dict[str, tuple[Any, Optional[str], int]]]:
    """The manifest fields every window shares, and per dataset its (tokenizer, template, pad id)."""
    per_dataset, tokenizer = {}, None
    for ds in config.datasets:
        spec = config.tokenizer_for(ds)
        handle = load_tokenizer(spec)
        tokenizer = tokenizer or handle.info.to_manifest()
        template = load_chat_template(config.chat.template, dict(handle.info.chat_templates))
        per_dataset[ds.name] = (spec, template if template is not None else handle.info.chat_template,
                                resolve_pad_id(config.pack, handle.info.pad_token_id, handle.info.eos_token_id))
    packed = config.pack.enabled
    base = {"config": config.to_dict(), "fingerprint": config.fingerprint(), "tokenizer": tokenizer,
            "schema": {"columns": {}, "packed": packed, "seq_length": config.pack.seq_length if packed else None,
                       "strategy": config.pack.strategy if packed else None},
            "output_format": config.save.format, "compression": config.save.codec}
    return base, per_dataset


#: Runners on which Beam's Python `ReadFromPubSub` reads messages (None: the local default). On the others
#: (PortableRunner, Flink, Spark, Prism) the read expands to nothing they execute: the job ends at once.
PUBSUB_RUNNERS = (None, "DirectRunner", "BundleBasedDirectRunner", "DataflowRunner", "TestDataflowRunner")


def build_streaming_pipeline(pipeline: beam.Pipeline, config: PipelineConfig, *, staging: str,
                             sources: Optional[dict[str, beam.PCollection]] = None,
                             arrival_time: bool = False) -> beam.PCollection:
    """Adds the streaming job to `pipeline`; returns the PCollection of committed window ids.

    Args:
      staging: where windows are staged before their commit.
      sources: per dataset, a PCollection of messages to use instead of reading Pub/Sub (tests feed
        a `TestStream` here).
      arrival_time: window messages by when they are read, not by their publish time.
    """
    base, per_dataset = _base_manifest(config)
    commits = []
    for ds in config.datasets:
        if sources is not None:
            messages = sources[ds.name]
        else:
            messages = pipeline | f"Read[{ds.name}]" >> beam.io.ReadFromPubSub(
                subscription=ds.pubsub_subscription, with_attributes=True)
        spec, template, pad_id = per_dataset[ds.name]
        commits.append(messages
                       | f"Window[{ds.name}]" >> WindowMessages(name=ds.name, settings=config.streaming,
                                                                        arrival_time=arrival_time)
                       | f"Process[{ds.name}]" >> ProcessWindow(config=config, dataset=ds, tokenizer=spec,
                                                                template=template, pad_id=pad_id, staging=staging))
    return (commits | "AllWindows" >> beam.Flatten()
            | "Commit" >> CommitWindows(output_dir=config.save.output_dir, base=base))


def _check(config: PipelineConfig) -> None:
    problems = config.validate()
    missing = [ds.name for ds in config.datasets if not ds.pubsub_subscription]
    if missing:
        problems.append(f"--streaming reads Pub/Sub: dataset(s) {', '.join(missing)} have no `pubsub_subscription`")
    for ds in config.datasets:
        if ds.pubsub_subscription and not _SUBSCRIPTION.fullmatch(ds.pubsub_subscription):
            problems.append(f"dataset '{ds.name}': pubsub_subscription '{ds.pubsub_subscription}' is not"
                            " projects/PROJECT/subscriptions/NAME (a project id is 6-30 lowercase letters, digits"
                            " or hyphens, starting with a letter; a name 3-255 letters, digits or -_.~+%, starting"
                            " with a letter)")
    if config.static_mix is not None:
        problems.append("mixing is not available in the streaming pipeline; mix the outputs with the reader's"
                        " MixedReader")
    if problems:
        raise ConfigError(problems)


def _require_pubsub_credentials() -> None:
    """One line when Pub/Sub cannot be used from here for want of credentials (before the job starts:
    Beam's reader would end in a long traceback ending in `DefaultCredentialsError`). The emulator
    (`PUBSUB_EMULATOR_HOST`) needs none."""
    import os

    if os.environ.get("PUBSUB_EMULATOR_HOST"):
        return
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:
        raise EasyDataError("--streaming reads Pub/Sub: install the streaming extra (pip install"
                            " 'easydata-beam[streaming]')") from None
    try:
        google.auth.default()
    except DefaultCredentialsError:
        raise EasyDataError("--streaming reads Pub/Sub but no Google Cloud credentials were found: run `gcloud auth"
                            " application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a key file), or"
                            " set PUBSUB_EMULATOR_HOST=HOST:PORT to use the Pub/Sub emulator") from None


def _prepare_output(config: PipelineConfig) -> None:
    """A streaming job may continue its own earlier streaming output (same config), else batch rules."""
    fs, root = get_fs(config.save.output_dir)
    if fs.exists(join(root, MANIFEST_NAME)):
        manifest = read_manifest(config.save.output_dir)
        if manifest.get("streaming") and manifest.get("config_fingerprint") == config.fingerprint():
            return
        if not config.save.overwrite:
            raise OutputError(f"output '{config.save.output_dir}' already exists and is not this streaming job's;"
                              " choose another --output (or --overwrite)")
    prepare_output(config.save.output_dir, config.save.overwrite)


def build_streaming_job(config: PipelineConfig, beam_args: Optional[list[str]] = None) -> beam.Pipeline:
    """Checks the config, prepares the output and builds the streaming job, without running it.

    Locally (no `--runner`, `DirectRunner`) the job runs on Beam's `BundleBasedDirectRunner`; any other
    runner name is passed to Beam. No runner is contacted, so a Dataflow job graph can be built and
    serialised offline.

    Raises:
      ConfigError, OutputError: user-caused problems, one line each.
    """
    if is_dask_runner(PipelineOptions(list(beam_args or [])).view_as(StandardOptions).runner):
        raise EasyDataError("the DaskRunner runs batch pipelines only: run --streaming locally or on Dataflow")
    _check(config)
    options = PipelineOptions(list(beam_args or []))
    options.view_as(StandardOptions).streaming = True
    runner_name = options.view_as(StandardOptions).runner
    if runner_name not in PUBSUB_RUNNERS:  # elsewhere Beam's Python ReadFromPubSub reads nothing and the job "succeeds"
        raise EasyDataError(f"--streaming reads Pub/Sub, which Beam's Python SDK reads only on DataflowRunner and"
                            f" locally (DirectRunner); --runner={runner_name} cannot: run the stream on one of those")
    local = runner_name in (None, "DirectRunner", "BundleBasedDirectRunner")
    if local:  # this process reads Pub/Sub (a remote runner's workers have their own service account)
        _require_pubsub_credentials()
    _prepare_output(config)
    if local:
        from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

        runner = BundleBasedDirectRunner()
    else:
        runner = runner_name
    pipeline = new_pipeline(runner, options)
    event_time = config.streaming.event_time or ("arrival" if local else "publish")
    build_streaming_pipeline(pipeline, config, staging=staging_dir(config.save.output_dir, new_run_id()),
                             arrival_time=event_time == "arrival")
    return pipeline


def run_streaming(config: PipelineConfig, beam_args: Optional[list[str]] = None, *,
                  wait: bool = True) -> Optional[PipelineResult]:
    """Runs the streaming pipeline until it is cancelled (Ctrl-C / SIGTERM).

    Args:
      wait: False submits the job and returns its `PipelineResult` at once (a Flex Template launcher
        must exit once the job is submitted; the job runs until drained or cancelled).
    """
    pipeline = build_streaming_job(config, beam_args)
    if not wait:
        return pipeline.run()
    print(f"easydata: streaming into {config.save.output_dir} (windows of {config.streaming.window_seconds}s);"
          " Ctrl-C to stop", file=sys.stderr)
    result = pipeline.run()

    def _stop(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for signum in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: cancel the job, keep the committed windows
        if previous[signum] is not signal.SIG_IGN:  # SIGHUP under `nohup` stays ignored
            signal.signal(signum, _stop)
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        # the signals after the first (a scheduler signals the command, then its group) must not cut the cancel short
        for signum in previous:
            signal.signal(signum, signal.SIG_IGN)
        print("easydata: cancelling the streaming job; committed windows are kept", file=sys.stderr)
        try:
            result.cancel()
        except Exception:  # the local runner may already be stopping
            pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return None
