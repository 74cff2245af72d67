"""The `easydata` command line (also `python -m easydata`).

Sub-commands: `run`, `tokenize`, `validate`, `inspect`, `stats`, `train-tokenizer`. Errors a user can
cause are printed as one line (`easydata: error: ...`) with exit status 2; a failed `validate` exits 1.
Beam is imported only by the commands that run a pipeline.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from typing import Any, Optional, Sequence

from easydata.config.models import DEFAULT_COMPRESSION
from easydata.config.secrets import redact_urls
from easydata.errors import EasyDataError, EnvironmentFailure, RunInconsistent, classify
from easydata.figures import count, percent

__all__ = ["main"]

ENGINE_HELP = ("what encodes plain documents: auto (the default: the fastest installed engine verified to give"
               " the reference ids), hf (Hugging Face tokenizers, the reference), fastokens or gigatoken"
               " (tokenize.engine)")


def _version() -> str:
    """The installed distribution's version (`easydata-beam`), or `unknown` when run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("easydata-beam")
    except PackageNotFoundError:
        return "unknown"


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="easydata", description="Tokenize, pack and shard text and chat data for JAX training, on Apache Beam.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run", help="run the batch pipeline of a config (no config: the embedded default job)",
        description="Run the batch pipeline described by CONFIG (YAML or JSON). Without CONFIG, run the embedded"
                    " default job (Python's standard library as a sample corpus, a tokenizer trained on it) into"
                    " ./easydata_output. Unknown --flags are passed to Beam as pipeline options (--runner,"
                    " --direct_num_workers, --project, --temp_location, ...).")
    run.add_argument("config", nargs="?", help="pipeline config file (YAML or JSON)")
    # many tools spell it as an option: `--config=job.yaml` went to Beam and the embedded default job ran
    run.add_argument("--config", dest="config_option", metavar="CONFIG", help="the same as CONFIG")
    run.add_argument("--output", help="output directory (overrides save.output_dir)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                     help="override a config value, e.g. --set save.num_shards=8 (repeatable)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing output (save.overwrite)")
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument("--dry-run", action="store_true", help="validate and show the inputs, splits, tokenizers, output"
                     " layout and an estimate of tokens and time, without running anything")
    run.add_argument("--verbose", action="store_true", help="show Beam's own log messages")
    run.add_argument("--tokenizer-engine", choices=("auto", "hf", "fastokens", "gigatoken"), default=None,
                     help=ENGINE_HELP)
    run.add_argument("--resume", action="store_true", help="continue an interrupted run of the same job in the output directory:"
                          " input already tokenized is not tokenized again")
    run.add_argument("--streaming", action="store_true", help="run the streaming pipeline: datasets read Pub/Sub"
                     " (`pubsub_subscription`), each event-time window is committed as it closes; runs until"
                     " Ctrl-C / SIGTERM")

    tok = sub.add_parser("tokenize", help="tokenize files into sharded output in one command",
                         description="One-line equivalent of tokenize_and_save. Unknown --flags go to Beam.")
    tok.add_argument("--data-files", required=True, action="append", metavar="GLOB",
                     help="input path or glob (repeatable)")
    tok.add_argument("--tokenizer", required=True, help="tokenizer dir, tokenizer.json, or cached hub id")
    tok.add_argument("--output", required=True, help="output directory")
    tok.add_argument("--name", default=None, help="dataset name (default: 'data')")
    tok.add_argument("--type", default=None, help="input type (default: from the file extension)")
    tok.add_argument("--content-field", default="text", help="field holding the text (default: text)")
    tok.add_argument("--format", default="parquet", help="parquet | arrow | jsonl | bin (flat token stream for"
                     " np.memmap) | npz (padded arrays) | megatron (Megatron-LM's .bin/.idx) | tfrecord | arrayrecord")
    defaults = ", ".join(f"{fmt} {codec}" for fmt, codec in DEFAULT_COMPRESSION.items())
    tok.add_argument("--compression", default=None, help=f"output compression (default: the format's: {defaults})")
    tok.add_argument("--max-length", type=int, default=None, help="truncate documents to N tokens")
    tok.add_argument("--stride", type=int, default=None, help="with --max-length: cut longer documents into windows"
                     " of N tokens that overlap by this many tokens (truncation: window) instead of truncating")
    tok.add_argument("--validation-fraction", type=float, default=None, metavar="F",
                     help="write a deterministic train/validation split (by document hash): outputs NAME/train and"
                          " NAME/validation")
    tok.add_argument("--num-shards", type=int, default=None, help="exact number of shards")
    tok.add_argument("--pack", action="store_true", help="pack documents into fixed-length rows")
    tok.add_argument("--seq-length", type=int, default=None,
                     help="packed row length (with --pack; default: pack.seq_length's, 2048)")
    tok.add_argument("--seed", type=int, default=42)
    tok.add_argument("--overwrite", action="store_true", help="replace an existing output")
    tok.add_argument("--resume", action="store_true", help="continue an interrupted run of the same command")
    tok.add_argument("--quiet", action="store_true", help="no progress display")
    tok.add_argument("--dry-run", action="store_true", help="show what would be done, without running anything")
    tok.add_argument("--verbose", action="store_true", help="show Beam's own log messages")
    tok.add_argument("--tokenizer-engine", choices=("auto", "hf", "fastokens", "gigatoken"), default="auto",
                     help=ENGINE_HELP)

    val = sub.add_parser("validate", help="check an output directory against its manifest")
    val.add_argument("output_dir")
    val.add_argument("--quiet", action="store_true", help="no progress display")

    ins = sub.add_parser("inspect", help="print the manifest summary and decoded sample rows")
    ins.add_argument("output_dir")
    ins.add_argument("-n", "--num-rows", type=_count, default=3, help="rows to show per dataset (default 3)")

    st = sub.add_parser("stats", help="documents, tokens, length percentiles, padding, per dataset and split",
                        description="Measure an output from its files: documents, rows, tokens, length distribution"
                                    " (percentiles), padding ratio, unique tokens, truncated/windowed documents, per"
                                    " output, per dataset and per split.")
    st.add_argument("output_dir")
    st.add_argument("--quiet", action="store_true", help="no progress display")
    st.add_argument("--plot", metavar="FILE.png", help="also draw the length histogram and token shares (needs"
                    " matplotlib: the `plot` extra); .png, .svg, .pdf, ... by the extension")
    st.add_argument("--json", action="store_true", help="print the statistics as JSON")

    tt = sub.add_parser("train-tokenizer", help="train a byte-level BPE (or unigram) tokenizer on data files",
                        description="Train a byte-level tokenizer on data files, streaming them (every input type"
                                    " `run` reads), and save tokenizer.json + tokenizer_config.json to DIR, usable"
                                    " as --tokenizer / default_tokenizer by every other command.")
    tt.add_argument("--data-files", required=True, action="append", metavar="GLOB",
                    help="input path or glob (repeatable)")
    tt.add_argument("--vocab-size", required=True, type=int, help="target vocabulary size, special tokens included")
    tt.add_argument("--output", required=True, metavar="DIR", help="directory to write the tokenizer to")
    tt.add_argument("--model", default="bpe", choices=["bpe", "unigram"], help="bpe (default) or unigram")
    tt.add_argument("--special-tokens", default="<s>,</s>,<pad>", metavar="LIST",
                    help="comma-separated, given the first ids; the first three are BOS, EOS, PAD (default:"
                         " <s>,</s>,<pad>)")
    tt.add_argument("--min-frequency", type=int, default=2, help="BPE: least occurrences of a merge (default 2)")
    tt.add_argument("--content-field", default="text", help="field holding the text (default: text)")
    tt.add_argument("--type", default=None, help="input type (default: from the file extension)")
    tt.add_argument("--num-rows", type=int, default=None, help="train on the first N documents only")
    tt.add_argument("--quiet", action="store_true", help="no progress display")
    tt.add_argument("--overwrite", action="store_true", help="replace a tokenizer already in DIR")
    return parser


def _config_for_run(args: argparse.Namespace) -> Any:
    from easydata.config import PipelineConfig, apply_overrides, load_mapping
    from easydata.tools.sample import DEFAULT_OUTPUT_DIR, default_config

    extra = list(args.overrides)
    if args.overwrite:
        extra.append("save.overwrite=true")
    if args.tokenizer_engine:
        extra.append(f"tokenize.engine={args.tokenizer_engine}")
    if args.config is None:
        data = apply_overrides(default_config(args.output or DEFAULT_OUTPUT_DIR).to_dict(), extra)
    else:
        data = apply_overrides(load_mapping(args.config), extra)
    if args.output:  # a path, taken as written (not parsed as a YAML value: `--output 2024`, `--output yes`)
        save = data.get("save")
        data["save"] = {**(save if isinstance(save, dict) else {}), "output_dir": args.output}
    return PipelineConfig.from_dict(data)


def _config_for_tokenize(args: argparse.Namespace) -> Any:
    from easydata.config import PipelineConfig

    if args.stride is not None and args.max_length is None:
        raise EasyDataError("--stride needs --max-length (the window length; the stride is the windows' overlap)")
    if args.seq_length is not None and not args.pack:
        raise EasyDataError("--seq-length needs --pack (it is the packed rows' length; without --pack each row is one"
                            " document)")
    data: dict[str, Any] = {
        "seed": args.seed,
        "default_tokenizer": args.tokenizer,
        "datasets": [{"name": args.name or "data", "data_files": args.data_files, "type": args.type,
                      "content_field": args.content_field}],
        "tokenize": {"max_length": args.max_length, "stride": args.stride, "engine": args.tokenizer_engine,
                     "truncation": "none" if args.max_length is None else "window" if args.stride is not None
                     else "truncate"},
        "pack": {"enabled": args.pack, **({} if args.seq_length is None else {"seq_length": args.seq_length})},
        "save": {"output_dir": args.output, "format": args.format, "compression": args.compression,
                 "num_shards": args.num_shards, "overwrite": args.overwrite,
                 "validation_fraction": args.validation_fraction},
    }
    return PipelineConfig.from_dict(data)


def _run_streaming(config: Any, beam_args: list[str], verbose: bool) -> int:
    from easydata.launch import run_streaming_job
    from easydata.logs import command_logging

    command_logging(verbose)
    run_streaming_job(config, beam_args)
    return 0


def _run_pipeline(config: Any, beam_args: list[str], quiet: bool, verbose: bool, resume: bool = False,
                  whole_process: bool = False) -> int:
    """Runs a batch job and prints its summary. `whole_process`: this process is the `easydata` command
    and ends with it (`easydata.launch.run_batch_job`)."""
    from easydata.launch import run_batch_job
    from easydata.logs import command_logging

    command_logging(verbose)
    result = run_batch_job(config, beam_args, show_progress=not quiet, resume=resume, whole_process=whole_process)
    m = result.manifest
    totals = m["totals"]
    print(f"wrote {result.output_dir}")
    for name, info in m["datasets"].items():
        unused = f"; {info['documents_unused']:,} read but left out by the mix" if info.get("documents_unused") else ""
        used = info.get("documents_selected", info["documents_written"])  # a mix's: those in the output
        print(f"  {name}: {count(used, 'document')} ({info['documents_rejected']:,} rejected{unused}),"
              f" {count(info['tokens'], 'token')}, {count(len(info['shards']), 'shard')}")
        if info.get("truncated_documents"):  # tokenize.truncation: truncate
            dropped = f", {count(info['truncated_tokens'], 'token')} dropped" if info.get("truncated_tokens") else ""
            print(f"    truncated: {count(info['truncated_documents'], 'document')} cut to tokenize.max_length{dropped} (their"
                  " tails are not in the output; `truncation: window` keeps them as more rows)")
        if info.get("windowed_documents"):
            print(f"    windows: {count(info['windowed_documents'], 'long document')} cut into {info['extra_windows']:,} more"
                  " rows (tokenize.truncation: window)")
        if "segments_per_row" in info:
            print(f"    packed: {count(info['rows'], 'row')} of {m['schema']['seq_length']}, {info['segments_per_row']:.2f}"
                  f" segments/row, {percent(info['padding_fraction'], 1, 2)} padding")
        asked = config.save.num_shards
        if asked is not None and len(info["shards"]) < asked:
            print(f"    note: {count(len(info['shards']), 'shard')}, not the {asked} asked for (save.num_shards): a shard holds"
                  f" at least one row and there are {info['rows']:,} rows")
    if m.get("mix"):
        from easydata.ops.mixing import describe_mix

        for line in describe_mix(m["mix"]):
            print(f"  {line}")
    read = m["documents_in"]
    print(f"  total: {count(read, 'document')} read, {count(totals['tokens'], 'token')} written,"
          f" {count(totals['shards'], 'shard')},"
          f" {result.elapsed_seconds:.1f}s, {result.tokens_per_second:,.0f} tokens/s")
    shuffle = m.get("shuffle")
    if shuffle and shuffle["bytes"]:
        stages = ", ".join(f"{stage} {info['bytes_per_token']:.2f}" for stage, info in shuffle["stages"].items())
        dictionary = ", zstd dictionary" if shuffle.get("dictionary_bytes") else ""
        print(f"  shuffle: {shuffle['bytes']:,} bytes of token data, {shuffle['bytes_per_token']:.2f} bytes/token"
              f" ({stages}{dictionary})")
    fast = {}  # a fast tokenizer engine's line, once for the datasets that share it
    for name, engine in m.get("tokenizer_engines", {}).items():
        running = engine.get("while_running") or {}
        if engine.get("name") != "hf":
            planned = engine.get("verified_at_planning") or {}
            line = (f"  tokenizer engine: {engine['name']} {engine.get('version', '')} (verified equal to hf on"
                    f" {planned.get('documents', 0):,} sampled and {planned.get('adversarial', 0):,} adversarial"
                    f" documents")
            fast.setdefault(line, [0, 0, 0])
            counts = fast[line]
            counts[0] += running.get("verified", 0)
            counts[1] += running.get("documents", 0)
            counts[2] += running.get("mismatches", 0)
    for line, (verified, documents, mismatches) in fast.items():
        if documents:  # a chat-only job encodes with hf (its loss mask needs offsets): no engine line then
            print(f"{line}; {verified:,} of {documents:,} checked again while running, {mismatches:,} mismatches)")
    if m["documents_rejected"]:
        print(f"  rejected records: {result.output_dir}/rejected/")
    for name, engine in m.get("tokenizer_engines", {}).items():
        running = engine.get("while_running") or {}
        if running.get("mismatches"):
            print(f"  warning: {name}: tokenizer engine {engine['name']} gave other ids than hf on"
                  f" {running['mismatches']:,} of the {running['verified']:,} documents checked (those kept hf's ids;"
                  f" {running['switched_to_hf_documents']:,} documents were then encoded with hf); documents not"
                  f" checked may differ: rerun with --tokenizer-engine hf")
    for name, entries in m.get("partial_inputs", {}).items():
        for entry in entries:
            unread = "an unknown part" if entry["unread_bytes"] is None else f"{entry['unread_bytes']:,} bytes"
            print(f"  warning: {name}: '{entry['path']}' was read only in part ({entry['read_bytes']:,} bytes read,"
                  f" {unread} not): {entry['reason']}")
    if config.save.push_to_hub:  # after the commit: a failed upload leaves the committed output as it is
        from easydata.io.hub import push_output

        print(f"  pushing to the Hugging Face Hub dataset repo {config.save.hub_repo_id} ...", flush=True)
        url = push_output(result.output_dir, str(config.save.hub_repo_id), private=config.save.hub_private,
                          token=config.save.hub_token, committed=True)
        print(f"  pushed to {url}")
    shown = shlex.quote(result.output_dir)  # a line to copy: a space or a `$` in the path must survive the shell
    print(f"next: easydata validate {shown}  |  easydata inspect {shown}")
    return 0


def _dry_run(config: Any) -> int:
    """`--dry-run`: the plan, printed; nothing runs and nothing is written."""
    from easydata.run.dry_run import plan_report

    print(plan_report(config).to_text())
    return 0


def _dispatch(args: argparse.Namespace, extra: list[str], whole_process: bool) -> int:
    if args.command in ("validate", "inspect", "stats", "train-tokenizer") and extra:
        raise EasyDataError(f"unrecognized arguments: {' '.join(extra)}")
    unknown = [a for a in extra if not a.startswith("--")]
    if unknown:
        raise EasyDataError(f"unexpected argument '{unknown[0]}' (Beam options look like --name=value)")
    if args.command == "run":
        if args.config_option is not None:
            if args.config is not None:
                raise EasyDataError(f"two configs given ({args.config} and --config {args.config_option}): give one")
            args.config = args.config_option
        if args.streaming:
            return _run_streaming(_config_for_run(args), extra, args.verbose)
        config = _config_for_run(args)
        if args.dry_run:
            return _dry_run(config)
        args._output_dir = config.save.output_dir  # for the resume hint of an interrupted run
        return _run_pipeline(config, extra, args.quiet, args.verbose, resume=args.resume,
                             whole_process=whole_process)
    if args.command == "tokenize":
        if args.dry_run:
            return _dry_run(_config_for_tokenize(args))
        return _run_pipeline(_config_for_tokenize(args), extra, args.quiet, args.verbose, resume=args.resume,
                             whole_process=whole_process)
    if args.command == "validate":
        from easydata.tools.validate import validate_output

        report = validate_output(args.output_dir, progress=not args.quiet)
        print(report.summary())
        return 0 if report.ok else 1
    if args.command == "stats":
        return _stats(args)
    if args.command == "train-tokenizer":
        return _train_tokenizer(args)
    if args.command == "inspect":
        from easydata.tools.inspect import inspect_output

        print(inspect_output(args.output_dir, args.num_rows))
        return 0
    raise AssertionError(args.command)  # argparse restricts the choices


def _stats(args: argparse.Namespace) -> int:
    import json

    from easydata.tools.stats import compute_stats, format_stats, plot_format, plot_stats

    if args.plot:
        plot_format(args.plot)  # matplotlib and the file's format, before a large output is read
    stats = compute_stats(args.output_dir, progress=not args.quiet)
    if args.plot:
        plot_stats(stats, args.plot)
    stats.pop("_histograms")
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    if args.plot and not args.json:
        print(f"plot: {args.plot}")
    return 0


def _train_tokenizer(args: argparse.Namespace) -> int:
    from easydata.run.progress import CountProgress
    from easydata.text.tokenizer import load_tokenizer
    from easydata.text.tokenizer_training import train_tokenizer_from_files

    special = [t.strip() for t in args.special_tokens.split(",") if t.strip()]
    out, counts = train_tokenizer_from_files(
        args.data_files, args.output, vocab_size=args.vocab_size, model=args.model, special_tokens=special,
        min_frequency=args.min_frequency, overwrite=args.overwrite, content_field=args.content_field,
        type=args.type, num_rows=args.num_rows,
        progress=None if args.quiet else lambda total: CountProgress(total, "reading"))
    info = load_tokenizer(str(out)).info
    print(f"wrote {out}: {args.model} tokenizer, vocab {info.vocab_size:,} (bos {info.bos_token_id}, eos"
          f" {info.eos_token_id}, pad {info.pad_token_id}), trained on {counts['documents']:,} documents"
          + (f" ({counts['rejected']:,} records rejected)" if counts["rejected"] else ""))
    print(f"next: easydata tokenize --data-files ... --tokenizer {shlex.quote(str(out))} --output OUT")
    return 0


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (a scheduler or `kill` ending the command, the terminal closed); raised in the
    main thread like Ctrl-C."""


def _interrupt(signum: int, frame: Any) -> None:
    """SIGINT / SIGTERM / SIGHUP in the command: from now on nothing the abandoned job logs is shown (Beam and
    its workers report each other's end as errors); `main` stops the workers and says what happened.

    Only the first signal does this; the ones after it are ignored: GNU `timeout`, Slurm and systemd
    signal the command and then its process group, so a second SIGTERM often arrives while the first is
    still stopping the workers, and a handler run again inside that wait waited for itself for ever."""
    import logging
    import signal

    global _signalled
    if _signalled is not None:  # already ending: the first signal's stop ends the command
        return
    _signalled = signum
    logging.disable(logging.CRITICAL)
    _stop_local_workers()  # before the job unwinds: its workers would log the lost connection
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


#: The signal `_interrupt` received, if any: with one worker the job runs in this process, and Beam wraps
#: the interrupt raised inside a step in an error of its own (`RuntimeError: KeyboardInterrupt [while
#: running ...]`); `main` still reports it as the interruption it is.
_signalled: Optional[int] = None


#: The signals that end a command the way Ctrl-C does (`console_main`).
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _resume_hint(args: argparse.Namespace, argv: Sequence[str], *, only_with_work: bool = False) -> Optional[str]:
    """Where the interrupted run's work is kept and the exact command that continues it (`only_with_work`:
    None unless a run left work to continue: a failure before any run began, such as a cache directory
    that cannot be made, is fixed, not resumed)."""
    if getattr(args, "command", None) not in ("run", "tokenize"):
        return None

    from easydata.run.checkpoint import unfinished_runs
    from easydata.run.output import staging_dir

    command = ["easydata", *argv] + ([] if "--resume" in argv else ["--resume"])
    output = getattr(args, "output", None) or getattr(args, "_output_dir", None)
    kept = ""
    if output:
        with contextlib.suppress(Exception):
            runs = unfinished_runs(output)
            if runs:
                kept = f"; its finished work is kept in {staging_dir(output, runs[0]['run_id'])}"
    if only_with_work and not kept:
        return None
    return f"the run stopped{kept}\neasydata: continue with: {shlex.join(command)}"


def main(argv: Optional[Sequence[str]] = None, *, whole_process: bool = False) -> int:
    """The command line; returns its exit code. `whole_process`: this process is the command and ends
    when it returns (`console_main`), so a local batch job may leave out what it never imports.

    Exit codes: 0 success; 1 `validate` found problems; 2 a user or environment error (one line);
    130 / 143 / 129 interrupted by SIGINT (Ctrl-C) / SIGTERM / SIGHUP (two lines: what happened, how to continue).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    try:
        return _dispatch(args, extra, whole_process)
    except (KeyboardInterrupt, Terminated):
        return _interrupted(_signalled, args, argv)
    except Exception as e:
        if _signalled is not None:  # the interrupt, wrapped by Beam where it arrived inside a step
            return _interrupted(_signalled, args, argv)
        error = classify(e)  # the user or environment error, wherever it was raised; None: a bug
        if error is None:
            raise
        if isinstance(error, RunInconsistent):
            return _inconsistent(error, args, argv)
        message = redact_urls(error.message)  # a URL's login and query values stay out of logs
        if isinstance(error, EnvironmentFailure):
            _stop_local_workers()
            hint = _resume_hint(args, argv, only_with_work=True)
            print(f"easydata: error: {message}" + (f"; {hint}" if hint else ""), file=sys.stderr)
            return 2
        print(f"easydata: error: {message}", file=sys.stderr)
        return 2


def _inconsistent(error: RunInconsistent, args: argparse.Namespace, argv: Sequence[str]) -> int:
    """A commit guard refused (counters that do not add up): nothing was committed and the tokenized work is
    kept, so one line says so and how to continue (a `--resume` redoes the stages after tokenizing)."""
    hint = _resume_hint(args, argv)
    print(f"easydata: error: {error.message}; nothing was committed (a bug in easydata: please report it)"
          + (f"; {hint}" if hint else ""), file=sys.stderr)
    return 2


def _interrupted(signum: Optional[int], args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Stops the workers and says in two lines what happened and how to continue; the exit code (128 + the
    signal's number). `signum` None: Python's own KeyboardInterrupt (`main` called without `console_main`)."""
    import signal

    signum = signal.SIGINT if signum is None else signum
    _stop_local_workers()
    hint = _resume_hint(args, argv)
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(f"easydata: interrupted by {signal.Signals(signum).name}" + (f": {hint}" if hint else ""),
              file=sys.stderr)
    return 128 + signum


def _stop_local_workers() -> None:
    from easydata.launch import stop_local_workers

    stop_local_workers()


def _quiet_broken_pipe() -> None:
    """The reader of our output went away (`easydata inspect OUT | head`): stop quietly, as Unix tools
    do (exit 141, 128 + SIGPIPE), instead of a BrokenPipeError traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
    os._exit(128 + 13)


def console_main() -> None:
    """The `easydata` command: `main`, then exit without tearing the interpreter down.

    Python's shutdown frees every object of a process that imported Beam, pyarrow and a tokenizer,
    which takes a noticeable part of a small job (figures: docs/performance.md#figures-behind-design-choices) and does nothing a
    finished command needs. So once `main` has returned and nothing else is running (no other
    non-daemon thread, no child process), output is flushed and the process ends at once. Otherwise,
    and when `main` raises, the interpreter exits normally.
    """
    import signal

    for signum in map(signal.Signals.__getitem__, STOP_SIGNALS):  # each ends the command the same way
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _interrupt)
        # else left ignored, as the shell asked: SIGHUP under `nohup`, SIGINT for `easydata ... &` in a script
    try:
        code = main(whole_process=True)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    import logging
    import multiprocessing
    import threading

    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon for t in threading.enumerate()) \
            or multiprocessing.active_children():
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))


if __name__ == "__main__":  # pragma: no cover
    console_main()
