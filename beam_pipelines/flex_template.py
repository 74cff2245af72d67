"""Dataflow Flex Template entry: template parameters -> a batch or streaming job, submitted without waiting.

The Flex Template launcher runs `python /template/main.py --config=... --output=... [Beam options]`
(`templates/dataflow/main.py` calls `main()` here; `python -m beam_pipelines.flex_template` does the
same). `main` parses the template parameters declared in `templates/dataflow/*/metadata.json`, turns
them into a `PipelineConfig`, builds the batch job (`beam_pipelines.batch.launch_batch`) or the
streaming job (`beam_pipelines.streaming.run_streaming(wait=False)`) and returns as soon as the
runner has accepted it: a launcher that waited would hold its VM for the whole job.

Every other `--flag` is a Beam pipeline option and passes through unchanged: the ones Dataflow's
launcher adds (`--runner`, `--project`, `--region`, `--temp_location`, `--staging_location`,
`--template_location`, ...) and the ones a user passes as parameters (`sdk_container_image`,
`setup_file`, `machine_type`, `max_num_workers`, `autoscaling_algorithm`, ...).

Cost: the launcher does the batch pipeline's whole preparation (config check, tokenizer load, input
listing, output staging) before submitting, so mistakes fail the launch with one line in its log.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from typing import Any, Optional, Sequence

from easydata.config import PipelineConfig, apply_overrides, parse_mapping_text
from easydata.errors import ConfigError, EasyDataError
from easydata.io.filesystems import read_text

__all__ = ["main", "parse_template_args", "config_from_template_args", "template_parser", "ENTRY_PARAMETERS",
           "BATCH_ONLY", "STREAMING_ONLY", "CONFIG_PATH_PATTERN"]

# A config *path*: one token ending in .yaml / .yml / .json (local, gs://, s3://, any fsspec URL).
# Anything else is read as the config's YAML or JSON text itself.
CONFIG_PATH_PATTERN = re.compile(r"\S+\.(?:ya?ml|json)")

# Parameters that only one of the two templates declares.
BATCH_ONLY = frozenset({"resume", "num_shards"})
STREAMING_ONLY = frozenset({"subscription", "window_seconds"})

_REMOTE_RUNNERS_NEED_IMAGE = {"DataflowRunner"}


def _parse_boolean(value: str) -> bool:
    """A BOOLEAN template parameter: `true` or `false` (any case), as the Dataflow console sends them."""
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _parse_positive_int(value: str) -> int:
    """A NUMBER template parameter that counts something: a whole number above zero."""
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got '{value}'")
    return number


class _Parser(argparse.ArgumentParser):
    """argparse that raises a one-line `EasyDataError` instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise EasyDataError(f"template parameters: {message.replace('argument --', '--')}")


def template_parser() -> argparse.ArgumentParser:
    """The template parameters the entry accepts (Beam options are left to Beam)."""
    parser = _Parser(prog="beam_pipelines.flex_template", allow_abbrev=False,
                     description="Launch an easydata batch or streaming job from Dataflow Flex Template parameters;"
                                 " other --flags are Beam pipeline options.")
    parser.add_argument("--config", required=True,
                        help="pipeline config: a path or URL ending in .yaml/.yml/.json (gs://...), or the YAML/JSON"
                             " text itself")
    parser.add_argument("--output", default=None, help="output directory (overrides save.output_dir), e.g. gs://b/out")
    parser.add_argument("--overrides", default=None,
                        help="config overrides `key.path=value`, separated by ';' or newlines"
                             " (e.g. save.num_shards=64;pack.seq_length=4096)")
    parser.add_argument("--tokenizer", default=None, help="overrides default_tokenizer")
    parser.add_argument("--num_shards", type=_parse_positive_int, default=None,
                        help="exact shard count per output (save.num_shards)")
    parser.add_argument("--overwrite", type=_parse_boolean, default=False,
                        help="replace an existing easydata output (save.overwrite)")
    parser.add_argument("--resume", type=_parse_boolean, default=False,
                        help="batch: continue an interrupted run of the same job in the output directory")
    parser.add_argument("--subscription", default=None,
                        help="streaming: Pub/Sub subscription of the config's single dataset"
                             " (projects/P/subscriptions/S)")
    parser.add_argument("--window_seconds", type=_parse_positive_int, default=None,
                        help="streaming: window length in seconds (streaming.window_seconds)")
    return parser


ENTRY_PARAMETERS = frozenset(action.dest for action in template_parser()._actions if action.dest != "help")


def parse_template_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Splits `argv` into the template parameters and the Beam options (everything else).

    Raises:
      EasyDataError: a missing or invalid template parameter, or a stray positional argument.
    """
    args, beam_args = template_parser().parse_known_args(list(argv))
    for i, arg in enumerate(beam_args):
        follows_flag = i > 0 and beam_args[i - 1].startswith("--") and "=" not in beam_args[i - 1]
        if not arg.startswith("-") and not follows_flag:  # `--runner DataflowRunner` is a flag and its value
            raise EasyDataError(f"template parameters: unexpected argument '{arg}' (template parameters and Beam"
                                " options look like --name=value)")
    return args, beam_args


def _load_config_mapping(value: str) -> dict[str, Any]:
    """The `config` parameter as a mapping: read from a path/URL, or parsed as YAML/JSON text."""
    import yaml

    text = value.strip()
    if not text:
        raise ConfigError("template parameter config is empty: give a gs:// path to a YAML/JSON config or its text")
    source = "config text"
    if CONFIG_PATH_PATTERN.fullmatch(text):
        source = f"config file '{text}'"
        try:
            text = read_text(text)
        except (EasyDataError, OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{source} cannot be read: {e}") from None
    try:
        data = parse_mapping_text(text)  # JSON is YAML; a repeated key is an error
    except yaml.YAMLError as e:
        raise ConfigError(f"{source} is not valid YAML or JSON: {str(e).replace(chr(10), ' ')}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must hold a mapping (seed, datasets, ...), got {type(data).__name__}:"
                          " a config parameter that is a path must end in .yaml, .yml or .json")
    return data


def _split_overrides(value: Optional[str]) -> list[str]:
    if not value:
        return []
    return [item.strip() for item in re.split(r"[;\n]", value) if item.strip()]


def config_from_template_args(args: argparse.Namespace) -> tuple[PipelineConfig, bool]:
    """The job's config from the parsed template parameters, and whether it is a streaming job.

    Precedence: the config, then `overrides` in order, then the dedicated parameters (`output`,
    `tokenizer`, `num_shards`, `overwrite`, `subscription`, `window_seconds`). The job is a streaming
    job exactly when a dataset reads a `pubsub_subscription` (as `easydata run --streaming` requires).

    Raises:
      ConfigError: an unreadable or invalid config, or parameters that do not fit it.
    """
    data = _load_config_mapping(args.config)
    overrides = _split_overrides(args.overrides)
    if args.output:
        overrides.append(f"save.output_dir={json.dumps(args.output)}")
    if args.tokenizer:
        overrides.append(f"default_tokenizer={json.dumps(args.tokenizer)}")
    if args.num_shards is not None:
        overrides.append(f"save.num_shards={args.num_shards}")
    if args.overwrite:
        overrides.append("save.overwrite=true")
    if args.window_seconds is not None:
        overrides.append(f"streaming.window_seconds={args.window_seconds}")
    data = apply_overrides(data, overrides)
    if args.subscription:
        datasets = data.get("datasets") or []
        if len(datasets) != 1 or not isinstance(datasets[0], dict):
            raise ConfigError(f"template parameter subscription applies to a config with one dataset, this one has"
                              f" {len(datasets)}: set each dataset's pubsub_subscription in the config or overrides")
        datasets[0]["pubsub_subscription"] = args.subscription
        datasets[0].pop("data_files", None)
    config = PipelineConfig.from_dict(data)
    streaming = any(ds.pubsub_subscription for ds in config.datasets)
    if streaming and args.resume:
        raise ConfigError("template parameter resume is for batch jobs; a streaming job appends to its own output")
    if streaming and args.num_shards is not None:
        raise ConfigError("template parameter num_shards is for batch jobs; a streaming job writes one shard per"
                          " window")
    if not streaming and args.window_seconds is not None:
        raise ConfigError("template parameter window_seconds is for streaming jobs, but no dataset of this config"
                          " reads a pubsub_subscription")
    return config, streaming


def _check_remote_run(config: PipelineConfig, beam_args: list[str]) -> None:
    """Mistakes that would only show up on the workers, reported at launch instead.

    Raises:
      ConfigError: a local output path, or no way for workers to import easydata.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions, WorkerOptions

    options = PipelineOptions(beam_args)
    runner = options.view_as(StandardOptions).runner
    if runner not in _REMOTE_RUNNERS_NEED_IMAGE:
        return
    output = config.save.output_dir
    if "://" not in output or output.startswith("file://"):
        raise ConfigError(f"output '{output}' is a local path: Dataflow workers cannot write it; use"
                          " gs://BUCKET/PATH (template parameter output)")
    setup = options.view_as(SetupOptions)
    if not (options.view_as(WorkerOptions).sdk_container_image or setup.setup_file or setup.extra_packages):
        raise ConfigError("Dataflow workers need easydata installed: pass sdk_container_image=IMAGE (the template's"
                          " own image), or setup_file=/template/setup.py to install it on Beam's default image")


def launch(argv: Sequence[str]) -> Any:
    """Parses `argv`, builds the job and submits it; returns the runner's `PipelineResult` without waiting.

    Raises:
      EasyDataError: user-caused problems (parameters, config, inputs, tokenizer, output).
    """
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    args, beam_args = parse_template_args(argv)
    config, streaming = config_from_template_args(args)
    if PipelineOptions(beam_args).view_as(StandardOptions).streaming and not streaming:
        raise ConfigError("this is a streaming launch (--streaming) but no dataset of the config reads a"
                          " pubsub_subscription: use the batch template for files")
    _check_remote_run(config, beam_args)
    if streaming:
        from beam_pipelines.streaming import run_streaming

        return run_streaming(config, beam_args, wait=False)
    from beam_pipelines.batch import launch_batch

    return launch_batch(config, beam_args, resume=args.resume)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Launches the job described by the template parameters in `argv` (default: `sys.argv[1:]`) and exits.

    Returns:
      0 once the job is submitted; 2 after printing one line for a user-caused problem.

    The launcher's log shows the entry's own lines and Beam's warnings; `--verbose` adds Beam's
    informational messages (a few hundred lines per launch: staging, the job graph, the runner's steps).
    """
    from easydata.logs import command_logging

    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "--verbose" in argv
    argv = [a for a in argv if a != "--verbose"]
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    else:  # as the `easydata` command: warnings and errors, not Beam's notes
        command_logging(verbose=False)
    try:
        result = launch(argv)
    except EasyDataError as e:
        print(f"easydata: error: {e.message}", file=sys.stderr)
        return 2
    print(f"easydata: job submitted{_job_id_note(result)}; not waiting for it to finish", file=sys.stderr)
    return 0


def _job_id_note(result: Any) -> str:
    """` (job id X)` when the runner reports one (Dataflow does; a launch that only writes a job file does not)."""
    try:
        job_id = result.job_id()
    except Exception:  # local results have no job id; a template launch may have no job yet
        return ""
    return f" (job id {job_id})" if job_id else ""


if __name__ == "__main__":  # pragma: no cover - the launcher runs templates/dataflow/main.py
    sys.exit(main())
