"""What users install is what is tested: the wheel, and the Dataflow image's install steps.

1. The wheel (`python -m build --wheel`), installed with its `dask` extra into a fresh virtualenv and
   run from a directory outside the repository: every module it ships imports, the default job runs
   and `easydata validate` passes on it, the Flex Template entry (`python -m beam_pipelines.flex_template`)
   runs a small job to a valid output, and the same job on `--runner=DaskRunner` (a local cluster) gives
   the same shard bytes.
2. The Dockerfile's install steps, replayed in another fresh virtualenv (no Docker daemon here): the
   files it COPYs into /template go into a directory laid out the same way, then its `pip install -r`,
   `pip install --no-deps /template`, `pip check` and import check, then a job through its Flex Template
   file (`/template/main.py`).

Usage: python .ci/check_release.py [--workdir DIR] [--skip-docker]. Exits non-zero on the first failure.
Needs `build` in the running interpreter (`pip install build`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    print(f"+ (cd {cwd} && {shlex.join(cmd)})", flush=True)
    done = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"check_release: failed (exit {done.returncode}): {shlex.join(cmd)}\n{done.stdout[-4000:]}"
                 f"\n{done.stderr[-4000:]}")
    return done.stdout


def fresh_venv(path: Path) -> Path:
    """A new virtualenv at `path` (removed first); returns its bin directory."""
    shutil.rmtree(path, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(path)], REPO)
    bin_dir = path / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], REPO)
    return bin_dir


def shipped_modules(wheel: Path) -> list[str]:
    """Every module of the wheel (but `__main__`s, which run the CLI when imported)."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".py") and ".dist-info/" not in n]
    modules = [n[:-3].replace("/", ".").removesuffix(".__init__") for n in names]
    return sorted(m for m in modules if not m.endswith("__main__"))


def digest(output: Path) -> dict[str, str]:
    """sha256 of every shard under an output (the manifest differs in timestamps and run ids)."""
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("part-*"))}


def small_job(work: Path, tokenizer: Path) -> Path:
    """A two-dataset mixed job on text this Python ships (its own modules' docstrings), written to `work`."""
    import ast

    texts = []
    for source in sorted(Path(os.__file__).parent.glob("*.py"))[:60]:
        try:
            doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8", errors="replace")))
        except SyntaxError:
            continue
        if doc:
            texts.append(doc)
    for name, part in (("a", texts[0::2]), ("b", texts[1::2])):
        with open(work / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in part)
    job = work / "job.json"
    job.write_text(json.dumps({
        "seed": 3, "default_tokenizer": str(tokenizer),
        "datasets": [{"name": "a", "data_files": str(work / "a.jsonl")},
                     {"name": "b", "data_files": str(work / "b.jsonl")}],
        "mix": {"weights": {"a": 0.6, "b": 0.4}},
        "pack": {"enabled": True, "seq_length": 256},
        "save": {"output_dir": str(work / "out-unused"), "num_shards": 2}}))
    return job


def check_wheel(work: Path) -> None:
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    leftovers = [REPO / "build", *REPO.glob("*.egg-info")]
    existed = {p for p in leftovers if p.exists()}
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)], REPO)
    for path in [REPO / "build", *REPO.glob("*.egg-info")]:  # setuptools' build tree: not left in the checkout
        if path not in existed:
            shutil.rmtree(path, ignore_errors=True)
    (wheel,) = dist.glob("easydata_beam-*.whl")
    modules = shipped_modules(wheel)
    for package in ("beam_pipelines.local", "beam_pipelines.dask", "easydata.reader", "transforms"):
        if package not in modules:
            sys.exit(f"check_release: the wheel ships no {package}")
    bin_dir = fresh_venv(work / "venv-wheel")
    run([str(bin_dir / "pip"), "install", "--quiet", f"{wheel}[dask]"], REPO)
    outside = work / "outside"  # not the repository: nothing is imported from the source tree
    shutil.rmtree(outside, ignore_errors=True)
    outside.mkdir()
    env = {"EASYDATA_CACHE": str(outside / "cache"), "PYTHONPATH": ""}
    python = str(bin_dir / "python")
    run([python, "-c", "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
         "print(len(sys.argv) - 1, 'modules import')", *modules], outside, env)
    located = run([python, "-c", "import easydata, beam_pipelines; print(easydata.__file__, beam_pipelines.__file__)"],
                  outside, env)
    run([python, "-c", "from easydata.run.run_plan import load_chat_template as t\n"  # package data, from the wheel
         "from easydata.text.chat_templates import NAMED_TEMPLATES as n\nassert all(t(x) for x in n), n"], outside, env)
    if not all(path.startswith(str(bin_dir.parent) + os.sep) for path in located.split()):
        sys.exit(f"check_release: imported from outside the wheel's virtualenv (the source tree?): {located}")
    print(run([str(bin_dir / "easydata"), "run"], outside, env).strip().splitlines()[0])
    print(run([str(bin_dir / "easydata"), "validate", "easydata_output"], outside, env).strip().splitlines()[0])
    tokenizer = next((outside / "cache").glob("sample-*/tokenizer"))
    job = small_job(outside, tokenizer)
    run([python, "-m", "beam_pipelines.flex_template", f"--config={job}", f"--output={outside / 'out-flex'}"],
        outside, env)
    run([str(bin_dir / "easydata"), "validate", str(outside / "out-flex")], outside, env)
    run([str(bin_dir / "easydata"), "run", str(job), "--output", str(outside / "out-local"), "--quiet"], outside, env)
    run([str(bin_dir / "easydata"), "run", str(job), "--output", str(outside / "out-dask"), "--quiet",
         "--runner=DaskRunner"], outside, env)
    run([str(bin_dir / "easydata"), "validate", str(outside / "out-dask")], outside, env)
    # A TFRecord output read back on the plain install, which has no pandas: pyarrow's `to_pandas_dtype` made
    # every TFRecord shard "unreadable (No module named 'pandas')" there, and the suite (with pandas) passed.
    run([str(bin_dir / "easydata"), "run", str(job), "--output", str(outside / "out-tfrecord"), "--quiet",
         "--set", "save.format=tfrecord"], outside, env)
    run([str(bin_dir / "easydata"), "validate", str(outside / "out-tfrecord"), "--quiet"], outside, env)
    read = run([python, "-c", "import importlib.util, sys\nfrom easydata.reader import TokenReader\n"
                "batch = next(iter(TokenReader(sys.argv[1], batch_size=2, num_epochs=1)))\n"
                "print(batch['input_ids'].shape, 'pandas installed:', importlib.util.find_spec('pandas') is not None)",
                str(outside / "out-tfrecord")], outside, env)
    print(f"TFRecord output read back: {read.strip()}")
    local, dask = digest(outside / "out-local"), digest(outside / "out-dask")
    if not local or local != dask or local != digest(outside / "out-flex"):
        sys.exit("check_release: the local, Flex Template entry and DaskRunner runs gave different shards")
    print(f"wheel: {wheel.name}: {len(modules)} modules import; default job, Flex Template entry and DaskRunner"
          f" outputs valid, {len(local)} shards identical")


def dockerfile_steps(dockerfile: Path) -> tuple[str, list[tuple[str, str]], str]:
    """The Dockerfile's requirements file, its COPY steps of the project into /template, and the import
    check of its install step."""
    text = dockerfile.read_text()
    requirements = re.search(r"^COPY (\S+) /template/requirements\.txt$", text, re.M)
    copies = [(src, dest) for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M)
              for *sources, dest in [line.split()] for src in sources]
    check = re.search(r"python -c \"([^\"]+)\"", text)
    if requirements is None or check is None or not copies:
        sys.exit("check_release: the Dockerfile's install steps are not where this check looks for them")
    return requirements.group(1), copies, check.group(1)


def check_docker_replay(work: Path) -> None:
    requirements, copies, import_check = dockerfile_steps(REPO / "Dockerfile")
    template = work / "image" / "template"
    shutil.rmtree(template.parent, ignore_errors=True)
    template.mkdir(parents=True)
    for src, dest in copies:  # COPY SRC /template/... (a directory's contents, or a file)
        target = template / Path(dest).relative_to("/template") if dest != "/template/" else template
        source = REPO / src
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            target = target / source.name if dest.endswith("/") else target
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    bin_dir = fresh_venv(work / "venv-image")
    run([str(bin_dir / "pip"), "install", "--quiet", "-r", str(template / "requirements.txt")], template)
    run([str(bin_dir / "pip"), "install", "--quiet", "--no-deps", str(template)], work)
    run([str(bin_dir / "pip"), "check"], work)
    outside = work / "image" / "run"
    outside.mkdir()
    env = {"EASYDATA_CACHE": str(outside / "cache"), "PYTHONPATH": ""}
    print(run([str(bin_dir / "python"), "-c", import_check], outside, env).strip())
    run([str(bin_dir / "easydata"), "run", "--output", str(outside / "default"), "--quiet"], outside, env)
    tokenizer = next((outside / "cache").glob("sample-*/tokenizer"))
    job = small_job(outside, tokenizer)
    run([str(bin_dir / "python"), str(template / "main.py"), f"--config={job}", f"--output={outside / 'out'}"],
        outside, env)
    run([str(bin_dir / "easydata"), "validate", str(outside / "out")], outside, env)
    print(f"image install replayed: {requirements} ({sum(1 for line in open(REPO / requirements) if '==' in line)}"
          " pins), the project with --no-deps, pip check, the import check, a job through /template/main.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="where the venvs and outputs go (default: a temp dir)")
    parser.add_argument("--skip-docker", action="store_true", help="only the wheel")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="easydata-release-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    check_wheel(work)
    if not args.skip_docker:
        check_docker_replay(work)
    print("check_release: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
