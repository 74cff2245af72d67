"""The Dataflow deliverables, checked offline: Flex Template metadata, the Dockerfile, the entry, the job graph.

- `templates/dataflow/*/metadata.json` validate against `templates/dataflow/metadata.schema.json`
  (Dataflow's `TemplateMetadata` / `ParameterMetadata`), their regexes compile and agree with what
  the entry accepts, and every parameter is one the entry (or Beam) actually takes; where gcloud is
  installed, `gcloud dataflow flex-template build --print-only` accepts them (it runs offline).
- The Dockerfile is checked statically (there is no Docker daemon here): pinned base images whose
  Python and Beam versions agree with each other and with the pinned requirements, the launcher
  binary, `FLEX_TEMPLATE_PYTHON_PY_FILE`, Beam's boot entrypoint, copied files that exist and that
  `.dockerignore` lets through.
- `beam_pipelines.flex_template` parses template parameters, passes Beam options through, submits
  without waiting, and reports user mistakes in one line.
- The batch and streaming jobs for `DataflowRunner` are built and serialised to the runner API proto
  with no network and no credentials (sockets to other hosts are refused during those tests); with
  the `gcp` extra installed, Beam's DataflowRunner also translates the job in a dry run.
- The SFT example config runs through the entry locally, and README documents every parameter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from apache_beam.runners.runner import PipelineRunner

from easydata.config import PipelineConfig
from easydata.errors import EasyDataError
from tests.conftest import REPO_ROOT, make_texts, write_jsonl

DATAFLOW = REPO_ROOT / "templates" / "dataflow"
SCHEMA = DATAFLOW / "metadata.schema.json"
METADATA = {"batch": DATAFLOW / "batch" / "metadata.json", "streaming": DATAFLOW / "streaming" / "metadata.json"}
DOCKERFILE = REPO_ROOT / "Dockerfile"
REQUIREMENTS = DATAFLOW / "requirements.txt"
IMAGE = "us-central1-docker.pkg.dev/my-project/easydata/easydata:2026-11-21"
DATAFLOW_ARGS = ["--runner=DataflowRunner", "--project=my-project", "--region=us-central1",
                 "--temp_location=gs://my-bucket/tmp", "--staging_location=gs://my-bucket/staging"]
# Beam's test flag for "contact no service": with the `gcp` extra installed, validating the options of a
# DataflowRunner pipeline otherwise asks GCS about the temp bucket (and retries for minutes without
# credentials).
OFFLINE_DATAFLOW_ARGS = [*DATAFLOW_ARGS, "--dry_run=True"]


def _metadata(kind: str) -> dict[str, Any]:
    return json.loads(METADATA[kind].read_text(encoding="utf-8"))


def _params(kind: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in _metadata(kind)["parameters"]}


def _beam_option_names() -> set[str]:
    from apache_beam.options.pipeline_options import PipelineOptions

    return set(PipelineOptions([]).get_all_options())


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuses every socket connection except to this machine, so a test proves it works offline."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and (host.startswith("127.") or host in ("localhost", "::1") or host.startswith("/")):
            return real_connect(self, address)
        raise OSError(f"test is offline: connection to {address!r} refused")

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield


# ---- metadata.json against Dataflow's TemplateMetadata schema ---------------------------------------


def _schema_errors(document: dict[str, Any]) -> list[str]:
    """Every problem of a metadata document: the JSON Schema, then the rules JSON Schema cannot state."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                for e in validator.iter_errors(document)]
    if problems:
        return problems
    params = document.get("parameters", [])
    names = [p["name"] for p in params]
    problems += [f"parameter '{n}' declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for p in params:
        for rx in p.get("regexes", []):
            try:
                re.compile(rx)
            except re.error as e:
                problems.append(f"parameter '{p['name']}': regex {rx!r} does not compile: {e}")
        if (p.get("paramType") == "ENUM") != ("enumOptions" in p):
            problems.append(f"parameter '{p['name']}': enumOptions go with paramType ENUM, and only with it")
        if "defaultValue" in p and not all(re.fullmatch(rx, p["defaultValue"]) for rx in p.get("regexes", [])):
            problems.append(f"parameter '{p['name']}': defaultValue {p['defaultValue']!r} fails its own regexes")
        for option in p.get("enumOptions", []):
            if not all(re.fullmatch(rx, option["value"]) for rx in p.get("regexes", [])):
                problems.append(f"parameter '{p['name']}': enum option {option['value']!r} fails its own regexes")
        if "parentName" in p and p["parentName"] not in names:
            problems.append(f"parameter '{p['name']}': parentName '{p['parentName']}' is not a parameter")
    if "defaultStreamingMode" in document and not (document.get("supportsAtLeastOnce")
                                                   and document.get("supportsExactlyOnce")):
        problems.append("defaultStreamingMode needs both supportsAtLeastOnce and supportsExactlyOnce")
    return problems


@pytest.mark.parametrize("kind", sorted(METADATA))
def test_metadata_is_valid_template_metadata(kind: str) -> None:
    document = _metadata(kind)
    assert _schema_errors(document) == []
    assert document["streaming"] is (kind == "streaming")
    assert all(p.get("regexes") for p in document["parameters"]), "every parameter says what values it takes"
    required = [p["name"] for p in document["parameters"] if not p.get("isOptional", False)]
    assert required == ["config"]


@pytest.mark.parametrize("mistake, expected", [
    (lambda d: d["parameters"][0].update(help_text=d["parameters"][0].pop("helpText")), "help_text"),
    (lambda d: d["parameters"][0].update(isOptional="true"), "'true' is not of type 'boolean'"),
    (lambda d: d["parameters"][0].update(paramType="GCS_FILE"), "'GCS_FILE' is not one of"),
    (lambda d: d["parameters"][0].update(regexes=["(unclosed"]), "does not compile"),
    (lambda d: d["parameters"].append(dict(d["parameters"][0])), "declared twice"),
    (lambda d: d.update(defaultStreamingMode="EXACTLY_ONCE"), "defaultStreamingMode needs both"),
    (lambda d: d.pop("name"), "'name' is a required property"),
])
def test_schema_catches_the_usual_metadata_mistakes(mistake: Any, expected: str) -> None:
    document = _metadata("batch")
    mistake(document)
    problems = _schema_errors(document)
    assert any(expected in p for p in problems), problems


def test_parameters_are_what_the_entry_or_beam_accepts() -> None:
    from beam_pipelines.flex_template import BATCH_ONLY, ENTRY_PARAMETERS, STREAMING_ONLY

    beam_options = _beam_option_names()
    assert not ENTRY_PARAMETERS & beam_options, "an entry parameter would hide a Beam option of the same name"
    for kind, not_here in (("batch", STREAMING_ONLY), ("streaming", BATCH_ONLY)):
        names = set(_params(kind))
        unknown = names - ENTRY_PARAMETERS - beam_options
        assert not unknown, f"{kind}: parameters nobody reads: {unknown}"
        assert ENTRY_PARAMETERS - not_here <= names, f"{kind}: entry parameters missing from metadata"
        assert not names & not_here, f"{kind}: declares parameters of the other template"
        assert {"sdk_container_image", "autoscaling_algorithm"} <= names  # Beam options worth a form field


def _entry_accepts(name: str, value: str, config_text: str) -> bool:
    """Whether the entry takes `--name=value` (with a config that fits the parameter)."""
    from beam_pipelines.flex_template import config_from_template_args, parse_template_args

    argv = [f"--config={config_text}"] if name != "config" else []
    argv.append(f"--{name}={value}")
    try:
        args, _ = parse_template_args(argv)
        config_from_template_args(args)
    except EasyDataError:
        return False
    return True


_BATCH_CONFIG = json.dumps({"default_tokenizer": "t", "datasets": [{"name": "web", "data_files": "gs://b/*.jsonl"}]})
_STREAM_CONFIG = json.dumps({"default_tokenizer": "t", "datasets": [
    {"name": "live", "pubsub_subscription": "projects/my-project/subscriptions/docs"}]})

_SAMPLES = {  # parameter -> (config it needs, values the entry takes, values it refuses)
    "config": (None, [_BATCH_CONFIG, f"seed: 7\n{yaml.safe_dump(json.loads(_BATCH_CONFIG))}"],
               ["gs://b/job", "", "just words", "[1, 2]"]),
    "overrides": (_BATCH_CONFIG, ["save.num_shards=8", "seed=3; save.format=arrow\n", "datasets.0.num_rows=10",
                                  "mix.weights.web=1;mix.stop_strategy=all_exhausted"],
                  ["no_equals_sign", "=5"]),
    "num_shards": (_BATCH_CONFIG, ["1", "256"], ["0", "-3", "many"]),
    "overwrite": (_BATCH_CONFIG, ["true", "false", "TRUE", "False"], ["maybe", "yes", "1"]),
    "resume": (_BATCH_CONFIG, ["true", "false"], ["2", ""]),
    "window_seconds": (_STREAM_CONFIG, ["60"], ["0", "1.5"]),
    "subscription": (_STREAM_CONFIG, ["projects/my-project/subscriptions/docs"], []),
}


@pytest.mark.parametrize("name", sorted(_SAMPLES))
def test_regexes_never_refuse_what_the_entry_accepts(name: str) -> None:
    config_text, good, bad = _SAMPLES[name]
    kind = "streaming" if name in ("window_seconds", "subscription") else "batch"
    regexes = _params(kind)[name]["regexes"]
    for value in good:
        assert _entry_accepts(name, value, config_text), value
        assert all(re.fullmatch(rx, value) for rx in regexes), f"{name}: metadata refuses {value!r}"
    for value in bad:
        assert not _entry_accepts(name, value, config_text), value
        assert not all(re.fullmatch(rx, value) for rx in regexes), f"{name}: metadata accepts {value!r}"


def test_subscription_regex_is_the_streaming_pipelines_check() -> None:
    from beam_pipelines.streaming import _SUBSCRIPTION

    assert _params("streaming")["subscription"]["regexes"] == [f"^{_SUBSCRIPTION.pattern}$"]
    for value in ("projects/my-project/subscriptions/docs", "projects/p/subscriptions/docs",
                  "my-project/docs", "projects/my-project/topics/docs"):
        assert bool(re.fullmatch(_params("streaming")["subscription"]["regexes"][0], value)) == \
            bool(_SUBSCRIPTION.fullmatch(value))


def test_beam_option_regexes() -> None:
    image_rx = _params("batch")["sdk_container_image"]["regexes"][0]
    for good in (IMAGE, "gcr.io/my-project/easydata:1", "localhost:5000/easydata@sha256:" + "a" * 64):
        assert re.fullmatch(image_rx, good), good
    for bad in ("easydata image", "https://gcr.io/p/i:1", ""):
        assert not re.fullmatch(image_rx, bad), bad
    output_rx = _params("batch")["output"]["regexes"][0]
    assert re.fullmatch(output_rx, "gs://my-bucket/data/v1") and not re.fullmatch(output_rx, "/local/out")


def _gcloud_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), CLOUDSDK_CORE_DISABLE_PROMPTS="1",
               CLOUDSDK_CORE_PROJECT="my-project", CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="1",
               CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="1")
    return env


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
@pytest.mark.parametrize("kind", sorted(METADATA))
def test_gcloud_flex_template_build_print_only(kind: str, tmp_path: Path) -> None:
    """gcloud builds the template spec from our metadata without contacting Google (--print-only)."""
    result = subprocess.run(
        ["gcloud", "dataflow", "flex-template", "build", "gs://my-bucket/templates/easydata.json",
         f"--image={IMAGE}", "--sdk-language=PYTHON", f"--metadata-file={METADATA[kind]}", "--print-only"],
        capture_output=True, text=True, timeout=180, env=_gcloud_env(tmp_path))
    assert result.returncode == 0, result.stderr
    spec = json.loads(yaml.safe_load(result.stdout))
    assert spec["image"] == IMAGE and spec["sdkInfo"] == {"language": "PYTHON"}
    ours = _metadata(kind)
    assert spec["metadata"]["name"] == ours["name"]
    assert spec["metadata"]["parameters"] == ours["parameters"]  # every field survived gcloud's parser


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_rejects_a_parameter_without_help_text(tmp_path: Path) -> None:
    """The gcloud check above is not vacuous: gcloud refuses metadata missing a required field."""
    document = _metadata("batch")
    del document["parameters"][0]["helpText"]
    bad = tmp_path / "metadata.json"
    bad.write_text(json.dumps(document))
    result = subprocess.run(
        ["gcloud", "dataflow", "flex-template", "build", "gs://my-bucket/t.json", f"--image={IMAGE}",
         "--sdk-language=PYTHON", f"--metadata-file={bad}", "--print-only"],
        capture_output=True, text=True, timeout=180, env=_gcloud_env(tmp_path))
    assert result.returncode != 0 and "helpText" in result.stderr


# ---- the Dockerfile, statically ---------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if raw.strip().startswith("#") or not raw.strip():
            continue
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        lines.append(current)
        current = ""
    out = []
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _dockerignore_allows(relative: str) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or one of its parents decides."""
    import fnmatch

    patterns = [p.strip() for p in (REPO_ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.strip().startswith("#")]
    parts = relative.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    allowed = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        rx = fnmatch.translate(body).replace(".*", "[^/]*").replace("[^/]*[^/]*", ".*")
        if body.startswith("**/"):
            rx = "(?:.*/)?" + fnmatch.translate(body[3:]).replace(".*", "[^/]*")
        if any(re.fullmatch(rx, prefix) for prefix in prefixes):
            allowed = negate
    return allowed


def _setup_requirements() -> tuple[list[str], dict[str, list[str]]]:
    """setup.py's `install_requires` and `extras_require`, read with `ast` (setup.py is not run)."""
    import ast

    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    keywords = {k.arg: k.value for k in call.keywords}
    return ast.literal_eval(keywords["install_requires"]), ast.literal_eval(keywords["extras_require"])


def test_base_images_are_pinned_and_agree() -> None:
    froms = [args.split()[0] for word, args in _instructions() if word == "FROM"]
    assert len(froms) == 3, froms
    for image in froms:
        assert "@sha256:" in image or (":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")), \
            f"{image} is not pinned by tag or digest"
    launcher = re.fullmatch(r"gcr\.io/dataflow-templates-base/python(\d)(\d+)-template-launcher-base:\S+", froms[0])
    sdk = re.fullmatch(r"apache/beam_python(\d)\.(\d+)_sdk:(\d+\.\d+\.\d+)", froms[1])
    base = re.fullmatch(r"python:(\d)\.(\d+)(?:\.\d+)?-slim-\w+", froms[2])
    assert launcher and sdk and base, froms
    assert launcher.groups() == sdk.groups()[:2] == base.groups(), "launcher, boot and interpreter: one Python"
    pins = dict(line.split("==", 1) for line in REQUIREMENTS.read_text().splitlines()
                if line and not line.startswith("#"))
    assert pins["apache-beam"] == sdk.group(3), "the pinned Beam must be the boot program's Beam"
    from packaging.requirements import Requirement

    beam_req = next(Requirement(r) for r in _setup_requirements()[0] if r.startswith("apache-beam"))
    assert beam_req.specifier.contains(sdk.group(3)), f"setup.py's {beam_req} excludes the image's Beam"


def test_image_is_launcher_and_worker() -> None:
    instructions = _instructions()
    copies = [args for word, args in instructions if word == "COPY"]
    assert "--from=launcher /opt/google/dataflow/python_template_launcher" \
           " /opt/google/dataflow/python_template_launcher" in copies
    assert "--from=beam /opt/apache/beam /opt/apache/beam" in copies
    entrypoints = [args for word, args in instructions if word == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["/opt/apache/beam/boot"]
    env = " ".join(args for word, args in instructions if word == "ENV")
    py_file = re.search(r"FLEX_TEMPLATE_PYTHON_PY_FILE=(\S+)", env)
    assert py_file, "FLEX_TEMPLATE_PYTHON_PY_FILE is not set"
    # The launcher file is copied from the repository and calls the entry.
    source = next(args.split()[0] for args in copies if args.split()[-1] == py_file.group(1))
    text = (REPO_ROOT / source).read_text()
    assert "from beam_pipelines.flex_template import main" in text and "sys.exit(main())" in text
    assert "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1" in env
    assert any(word == "RUN" and re.search(r"useradd .*--uid (?!0\b)\d+", args) for word, args in instructions)


def test_copied_files_exist_and_reach_the_build_context() -> None:
    copies = [args.split() for word, args in _instructions() if word == "COPY" and not args.startswith("--from")]
    assert copies
    for *sources, _ in copies:
        for source in sources:
            assert (REPO_ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert _dockerignore_allows(source), f"COPY {source}: excluded by .dockerignore"
    assert not _dockerignore_allows("tests/test_dataflow_template.py")
    assert not _dockerignore_allows(".git/config")
    assert not _dockerignore_allows("easydata/__pycache__/cli.cpython-311.pyc")


def test_layers_are_cache_friendly_and_small() -> None:
    instructions = _instructions()
    order = [args.split()[0] for word, args in instructions if word == "COPY" and not args.startswith("--from")]
    assert order[0] == "templates/dataflow/requirements.txt", "dependencies must be installed before the code"
    runs = [args for word, args in instructions if word == "RUN" and "pip install" in args]
    assert runs and all("--no-cache-dir" in r for r in runs)
    assert any("-r /template/requirements.txt" in r for r in runs)
    assert any("--no-deps" in r and "pip check" in r for r in runs)


def test_requirements_pin_everything_the_package_needs() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lines = [line for line in REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")]
    pins = {}
    for line in lines:
        req = Requirement(line)
        spec = str(req.specifier)
        assert spec.startswith("==") and "," not in spec, f"not pinned: {line}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"pinned twice: {name}"
        pins[name] = spec[2:]
    install, extras = _setup_requirements()
    for raw in install + extras["gcp"] + extras["streaming"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (setup.py) is not pinned for the image"
        assert req.specifier.contains(pins[name], prereleases=True), f"pin {name}=={pins[name]} violates {req}"
    assert "easydata-beam" not in pins


# ---- the entry ---------------------------------------------------------------------------------------


def test_beam_options_pass_through_unchanged() -> None:
    from apache_beam.options.pipeline_options import (GoogleCloudOptions, PipelineOptions, SetupOptions,
                                                      StandardOptions, WorkerOptions)

    from beam_pipelines.flex_template import parse_template_args

    args, beam_args = parse_template_args([
        "--config=gs://b/job.yaml", "--output=gs://b/out", *DATAFLOW_ARGS, f"--sdk_container_image={IMAGE}",
        "--setup_file=/template/setup.py", "--machine_type=n2-highmem-8", "--autoscaling_algorithm=NONE",
        "--num_workers=16", "--max_num_workers=64", "--disk_size_gb=100", "--experiments=shuffle_mode=service"])
    assert (args.config, args.output) == ("gs://b/job.yaml", "gs://b/out")
    options = PipelineOptions(beam_args)
    worker, cloud = options.view_as(WorkerOptions), options.view_as(GoogleCloudOptions)
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    assert (worker.sdk_container_image, worker.machine_type, worker.autoscaling_algorithm) == \
        (IMAGE, "n2-highmem-8", "NONE")
    assert (worker.num_workers, worker.max_num_workers, worker.disk_size_gb) == (16, 64, 100)
    assert options.view_as(SetupOptions).setup_file == "/template/setup.py"
    assert (cloud.project, cloud.region, cloud.temp_location) == ("my-project", "us-central1", "gs://my-bucket/tmp")


def test_config_from_path_url_or_text(tmp_path: Path, memory_fs: Any) -> None:
    from beam_pipelines.flex_template import config_from_template_args, parse_template_args

    data = json.loads(_BATCH_CONFIG)
    local = tmp_path / "job.yaml"
    local.write_text(yaml.safe_dump(data))
    memory_fs.pipe("/configs/job.json", json.dumps(data).encode())
    for value in (str(local), "memory://configs/job.json", json.dumps(data), yaml.safe_dump(data)):
        args, _ = parse_template_args([f"--config={value}"])
        config, streaming = config_from_template_args(args)
        assert config.datasets[0].data_files == "gs://b/*.jsonl" and not streaming


def test_dedicated_parameters_win_over_overrides_and_config() -> None:
    from beam_pipelines.flex_template import config_from_template_args, parse_template_args

    args, _ = parse_template_args([
        f"--config={_BATCH_CONFIG}", "--overrides=save.num_shards=4;save.output_dir=gs://b/from-overrides;"
        "pack.enabled=true\npack.seq_length=4096", "--output=gs://b/out", "--num_shards=32", "--tokenizer=/opt/tok",
        "--overwrite=TRUE"])
    config, _ = config_from_template_args(args)
    assert (config.save.output_dir, config.save.num_shards, config.save.overwrite) == ("gs://b/out", 32, True)
    assert (config.pack.enabled, config.pack.seq_length, config.default_tokenizer) == (True, 4096, "/opt/tok")


def test_subscription_makes_a_streaming_job() -> None:
    from beam_pipelines.flex_template import config_from_template_args, parse_template_args

    args, _ = parse_template_args([f"--config={_BATCH_CONFIG}", "--subscription=projects/my-project/subscriptions/s",
                                   "--window_seconds=30"])
    config, streaming = config_from_template_args(args)
    assert streaming and config.datasets[0].pubsub_subscription == "projects/my-project/subscriptions/s"
    assert config.datasets[0].data_files is None and config.streaming.window_seconds == 30


@pytest.mark.parametrize("argv, message", [
    ([], "template parameters: the following arguments are required: --config"),
    ([f"--config={_BATCH_CONFIG}", "--overwrite=maybe"], "template parameters: --overwrite: expected true or false,"
     " got 'maybe'"),
    ([f"--config={_BATCH_CONFIG}", "--num_shards=0"], "--num_shards: expected a positive whole number"),
    (["--config=gs://b/job"], "a config parameter that is a path must end in .yaml, .yml or .json"),
    (["--config=/does/not/exist.yaml"], "config file '/does/not/exist.yaml' cannot be read"),
    (["--config=seed: [1"], "config text is not valid YAML or JSON"),
    ([f"--config={_BATCH_CONFIG}", "--overrides=save.nope=1"], "unknown key"),
    ([f"--config={_BATCH_CONFIG}", "--resume=true", "--subscription=projects/my-project/subscriptions/s"],
     "resume is for batch jobs"),
    ([f"--config={_BATCH_CONFIG}", "--window_seconds=60"], "window_seconds is for streaming jobs"),
    ([f"--config={_STREAM_CONFIG}", "--num_shards=8"], "num_shards is for batch jobs"),
    ([f"--config={json.dumps({'default_tokenizer': 't', 'datasets': [{'name': 'a', 'data_files': 'x'}, {'name': 'b', 'data_files': 'y'}]})}",
      "--subscription=projects/my-project/subscriptions/s"], "applies to a config with one dataset, this one has 2"),
    ([f"--config={_BATCH_CONFIG}", "stray"], "unexpected argument 'stray'"),
    ([f"--config={_BATCH_CONFIG}", "--output=out/local", *DATAFLOW_ARGS, f"--sdk_container_image={IMAGE}"],
     "output 'out/local' is a local path: Dataflow workers cannot write it"),
    ([f"--config={_BATCH_CONFIG}", "--output=gs://b/out", *DATAFLOW_ARGS], "pass sdk_container_image=IMAGE"),
    ([f"--config={_BATCH_CONFIG}", "--streaming"], "this is a streaming launch (--streaming) but no dataset"),
])
def test_user_mistakes_end_in_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from beam_pipelines.flex_template import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("easydata: error: ") and message in err[0], err


def test_runner_names_and_dataflow_options_are_accepted_space_separated() -> None:
    from beam_pipelines.flex_template import parse_template_args

    _, beam_args = parse_template_args(["--config=x.yaml", "--runner", "DataflowRunner", "--region", "r"])
    assert beam_args == ["--runner", "DataflowRunner", "--region", "r"]


# A Beam runner (not our code) whose results fail the test if anyone waits for them.
_SUBMITTED: list[Any] = []


class NoWaitRunner(PipelineRunner):
    """Records the submitted pipeline's proto and options; its result refuses `wait_until_finish`."""

    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        from apache_beam.runners.runner import PipelineResult, PipelineState

        _SUBMITTED.append((pipeline.to_runner_api(), options))

        class Submitted(PipelineResult):
            def wait_until_finish(self, duration: Any = None) -> Any:
                raise AssertionError("the Flex Template entry must not wait for the job")

            def job_id(self) -> str:
                return "2026-11-21_00_00_00-123"

        return Submitted(PipelineState.RUNNING)


def _small_job(tmp_path: Path, tokenizer_dir: Path, *, streaming: bool = False) -> Path:
    if streaming:
        dataset = {"name": "live", "pubsub_subscription": "projects/my-project/subscriptions/docs"}
    else:
        write_jsonl(tmp_path / "data" / "web.jsonl", [{"text": t} for t in make_texts(40, seed=5)])
        write_jsonl(tmp_path / "data" / "code.jsonl", [{"text": t} for t in make_texts(25, seed=6)])
        dataset = {"name": "web", "data_files": str(tmp_path / "data" / "web.jsonl")}
    data: dict[str, Any] = {"default_tokenizer": str(tokenizer_dir), "datasets": [dataset],
                            "pack": {"enabled": True, "seq_length": 64}, "save": {"output_dir": str(tmp_path / "out")}}
    if not streaming:
        data["datasets"].append({"name": "code", "data_files": str(tmp_path / "data" / "code.jsonl")})
        data["mix"] = {"weights": {"web": 0.6, "code": 0.4}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_entry_submits_and_returns_without_waiting(streaming: bool, tmp_path: Path, tokenizer_dir: Path,
                                                    capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    from apache_beam.options.pipeline_options import StandardOptions

    import beam_pipelines.batch
    from beam_pipelines.flex_template import main

    import beam_pipelines.streaming

    # The stand-in runs nothing, so its workers' reach (local paths here) and Pub/Sub reading do not matter.
    monkeypatch.setattr(beam_pipelines.batch, "check_reachable_by_workers", lambda config, runner: None)
    monkeypatch.setattr(beam_pipelines.streaming, "PUBSUB_RUNNERS",
                        (*beam_pipelines.streaming.PUBSUB_RUNNERS, f"{__name__}.NoWaitRunner"))

    _SUBMITTED.clear()
    job = _small_job(tmp_path, tokenizer_dir, streaming=streaming)
    assert main([f"--config={job}", f"--runner={__name__}.NoWaitRunner"]) == 0
    assert "job submitted (job id 2026-11-21_00_00_00-123); not waiting" in capsys.readouterr().err
    [(proto, options)] = _SUBMITTED
    assert options.view_as(StandardOptions).streaming is streaming
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert ({"Read[live]", "Commit"} if streaming else {"Read[web]", "Mix", "CommitOutput"}) <= names


@pytest.mark.slow
def test_entry_runs_a_local_job_to_a_valid_output(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Without --runner the same entry runs the job locally (the local runner finishes inside run())."""
    from beam_pipelines.flex_template import main
    from easydata.tools.validate import validate_output

    job = _small_job(tmp_path, tokenizer_dir)
    assert main([f"--config={job}", f"--output={tmp_path / 'local-out'}", "--num_shards=2"]) == 0
    report = validate_output(str(tmp_path / "local-out"))
    assert report.ok, report.summary()
    manifest = json.loads((tmp_path / "local-out" / "manifest.json").read_text())
    assert len(manifest["datasets"]["mixed"]["shards"]) == 2


# ---- the DataflowRunner job graph, offline -----------------------------------------------------------


def _dataflow_environment(options: Any) -> Any:
    """The worker environment DataflowRunner gives the job (its default: the sdk_container_image)."""
    from apache_beam.options.pipeline_options import WorkerOptions
    from apache_beam.transforms import environments

    return environments.DockerEnvironment.from_container_image(options.view_as(WorkerOptions).sdk_container_image)


@pytest.mark.slow
def test_batch_graph_for_dataflow_builds_and_serialises_offline(tmp_path: Path, tokenizer_dir: Path,
                                                                 no_network: None) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import WorkerOptions
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    from beam_pipelines.batch import build_batch_job
    from easydata.config import load_mapping

    config = PipelineConfig.from_dict(load_mapping(_small_job(tmp_path, tokenizer_dir)))
    pipeline, plan = build_batch_job(config, [*OFFLINE_DATAFLOW_ARGS, f"--sdk_container_image={IMAGE}",
                                              "--machine_type=n2-highmem-8", "--max_num_workers=8",
                                              "--autoscaling_algorithm=NONE"])
    assert type(pipeline.runner).__name__ == "DataflowRunner"
    assert pipeline._options.view_as(WorkerOptions).machine_type == "n2-highmem-8"
    proto = pipeline.to_runner_api(default_environment=_dataflow_environment(pipeline._options))

    names = {t.unique_name for t in proto.components.transforms.values()}
    expected = {"Read[web]", "Read[code]", "Tokenize[web]", "Tokenize[code]", "Mix", "Pack[mixed]",
                "Write[mixed]", "CommitOutput"}
    assert expected <= names, expected - names
    [env] = proto.components.environments.values()
    assert env.urn == common_urns.environments.DOCKER.urn
    assert beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image == IMAGE
    pardos = [t for t in proto.components.transforms.values() if t.spec.urn == common_urns.primitives.PAR_DO.urn]
    assert len(pardos) > 10 and all(t.environment_id for t in pardos)

    again = beam_runner_api_pb2.Pipeline.FromString(proto.SerializeToString())
    assert again == proto
    # Rebuilding the pipeline from the proto unpickles every DoFn, as a Dataflow worker does.
    rebuilt = beam.Pipeline.from_runner_api(again, pipeline.runner, pipeline._options)
    assert {t.unique_name for t in rebuilt.to_runner_api().components.transforms.values()} >= expected
    assert plan.staging.startswith(str(tmp_path / "out"))  # the launcher prepared the output


def test_streaming_graph_for_dataflow_builds_and_serialises_offline(tmp_path: Path, tokenizer_dir: Path,
                                                                     no_network: None) -> None:
    from apache_beam.portability.api import beam_runner_api_pb2

    from beam_pipelines.streaming import build_streaming_job
    from easydata.config import load_mapping

    config = PipelineConfig.from_dict(load_mapping(_small_job(tmp_path, tokenizer_dir, streaming=True)))
    pipeline = build_streaming_job(config, [*OFFLINE_DATAFLOW_ARGS, f"--sdk_container_image={IMAGE}",
                                            "--enable_streaming_engine"])
    assert type(pipeline.runner).__name__ == "DataflowRunner"
    proto = pipeline.to_runner_api(default_environment=_dataflow_environment(pipeline._options))
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert {"Read[live]", "Window[live]", "Process[live]", "Commit"} <= names
    unbounded = beam_runner_api_pb2.IsBounded.UNBOUNDED
    assert any(pc.is_bounded == unbounded for pc in proto.components.pcollections.values())
    assert beam_runner_api_pb2.Pipeline.FromString(proto.SerializeToString()) == proto


def test_dataflow_runner_translates_the_job_offline(tmp_path: Path, tokenizer_dir: Path, no_network: None) -> None:
    """Beam's own DataflowRunner turns the graph into a Dataflow job (dry run: nothing is staged or sent)."""
    pytest.importorskip("apitools", reason="needs apache-beam[gcp] (the `gcp` extra)")
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
    from apache_beam.runners.dataflow.internal import apiclient

    from beam_pipelines.batch import build_batch_job
    from easydata.config import load_mapping

    config = PipelineConfig.from_dict(load_mapping(_small_job(tmp_path, tokenizer_dir)))
    args = [*OFFLINE_DATAFLOW_ARGS, f"--sdk_container_image={IMAGE}", "--machine_type=n2-highmem-8",
            "--max_num_workers=8", "--autoscaling_algorithm=NONE"]
    pipeline, _ = build_batch_job(config, args)
    options = PipelineOptions(args)
    result = DataflowRunner().run_pipeline(pipeline, options)
    # The job's environment, as create_job would send it (minus the staged files).
    environment = apiclient.Environment(
        packages=[], options=options, environment_version=getattr(apiclient, "_FNAPI_ENVIRONMENT_MAJOR_VERSION", "8"),
        proto_pipeline_staged_url="gs://my-bucket/staging/pipeline.pb", proto_pipeline=result.job.proto_pipeline).proto
    [pool] = environment.worker_pools
    assert (pool.machine_type, pool.autoscaling_settings.max_num_workers) == ("n2-highmem-8", 8)
    assert pool.autoscaling_settings.algorithm.name == "AUTOSCALING_ALGORITHM_NONE"
    assert [c.container_image for c in pool.sdk_harness_container_images] == [IMAGE]
    assert "use_runner_v2" in environment.experiments


def test_readme_documents_the_templates() -> None:
    section = (REPO_ROOT / "docs" / "dataflow.md").read_text(encoding="utf-8")  # the Dataflow page
    for needed in ("gcloud builds submit", "gcloud dataflow flex-template build", "gcloud dataflow flex-template run",
                   "### Sizing", "### Cost and time model", "### Troubleshooting on Dataflow"):
        assert needed in section, needed
    for kind in METADATA:
        for name in _params(kind):
            assert f"`{name}`" in section, f"docs/dataflow.md does not mention parameter {name}"


@pytest.mark.slow
def test_sft_example_runs_through_the_entry(tmp_path: Path, tokenizer_dir: Path) -> None:
    """templates/examples/sft_chat.yaml, with local data in place of its gs:// paths, runs to a valid output."""
    from beam_pipelines.flex_template import main
    from easydata.tools.validate import validate_output

    openai = write_jsonl(tmp_path / "openai.jsonl", [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"question {i}"},
                      {"role": "assistant", "content": f"answer {i} " * (1 + i % 4)}]} for i in range(30)])
    sharegpt = write_jsonl(tmp_path / "sharegpt.jsonl", [
        {"conversations": [{"from": "human", "value": f"hi {i}"}, {"from": "gpt", "value": f"hello {i} " * 3}]}
        for i in range(12)])
    chatml = REPO_ROOT / "tests" / "chat_templates" / "chatml.jinja"
    out = tmp_path / "sft"
    overrides = [f"datasets.0.data_files={openai}", f"datasets.1.data_files={sharegpt}", f"chat.template={chatml}",
                 "pack.seq_length=128", "tokenize.max_length=128"]
    assert main([f"--config={REPO_ROOT / 'templates' / 'examples' / 'sft_chat.yaml'}", f"--output={out}",
                 f"--tokenizer={tokenizer_dir}", f"--overrides={';'.join(overrides)}", "--num_shards=1"]) == 0
    assert validate_output(str(out)).ok
    manifest = json.loads((out / "manifest.json").read_text())
    mixed = manifest["datasets"]["mixed"]  # the example mixes its two datasets: one may be subsampled
    assert mixed["documents_read"] == 42 and manifest["documents_rejected"] == 0
    assert mixed["documents_selected"] + mixed["documents_unused"] == mixed["documents_written"] == 42
    assert "loss_mask" in manifest["schema"]["columns"]


@pytest.mark.slow
def test_the_entry_prints_its_own_lines_unless_verbose(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: ~290 lines of Beam's INFO logs per launch."""
    import subprocess
    import sys

    job = _small_job(tmp_path, tokenizer_dir)
    lines = {}
    for extra in ([], ["--verbose"]):
        out = tmp_path / f"out{len(extra)}"
        done = subprocess.run([sys.executable, "-m", "beam_pipelines.flex_template", f"--config={job}",
                               f"--output={out}", *extra], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        lines[bool(extra)] = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[False] == ["easydata: job submitted; not waiting for it to finish"], lines[False][:20]
    assert len(lines[True]) > 10 and any(line.startswith("INFO ") for line in lines[True])
