"""The architecture, checked statically: every `import` statement of every module (at any depth,
in functions too) is parsed, and the layers of docs/architecture.md are enforced.

- No import cycles anywhere (a cycle hidden behind a function-level import is still a cycle), between modules
  or between the core's packages.
- The core (`easydata/`) never imports `transforms`, `beam_pipelines` or `apache_beam`, except
  `easydata/launch.py`, which launches jobs for the command and the Python API and may import
  `beam_pipelines` inside functions only.
- `transforms/` never imports `beam_pipelines`.
- The reader (`easydata/reader/`) imports no Beam, and JAX / TensorFlow only inside functions.
Plus the runtime check that importing `easydata` / `easydata.reader` loads neither Beam nor JAX.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("easydata", "transforms", "beam_pipelines")
LAUNCHER = "easydata.launch"


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """`(imported module, at module level)` for every import statement of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body} | {id(n) for node in tree.body if isinstance(node, (ast.If, ast.Try))
                                               for n in ast.walk(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.extend((target, id(node) in top) for target in targets)
    return found


def _internal(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


GRAPH = {name: {(t, top) for t, top in _imports(name, path)} for name, path in MODULES.items()}


def _edges(name: str) -> set[str]:
    return {m for t, _ in GRAPH[name] if (m := _internal(t)) and m != name}


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in _edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in MODULES:
        if module not in index:
            visit(module)
    assert cycles == []


def _package(module: str) -> str | None:
    """`easydata.io.sources` -> `easydata.io`; None for a module at the top of `easydata` (config, cli, rows...)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "easydata" and len(parts) > 2 or \
        parts[0] == "easydata" and len(parts) == 2 and (ROOT / "easydata" / parts[1] / "__init__.py").is_file() else None


def test_no_cycles_between_the_cores_packages() -> None:
    """The core's packages form layers (io <- ops <- text <- run / core <- reader <- compat / tools): a package
    that imports another is never imported by it, directly or through others, at any depth of any module."""
    packages: dict[str, set[str]] = {}
    for module in MODULES:
        source = _package(module)
        if source is None:
            continue
        packages.setdefault(source, set()).update(
            target for target in map(_package, _edges(module)) if target is not None and target != source)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(p == goal or (p not in seen and not seen.add(p) and reaches(p, goal, seen))
                   for p in packages.get(start, ()))

    cycles = sorted((a, b) for a in packages for b in packages[a] if reaches(b, a, set()))
    assert len(packages) >= 8 and cycles == [], cycles


def test_the_core_never_reaches_up() -> None:
    problems = []
    for name in MODULES:
        if not name.startswith("easydata"):
            continue
        for target, top in GRAPH[name]:
            upper = target.split(".")[0] in ("transforms", "beam_pipelines", "apache_beam")
            if upper and (name != LAUNCHER or top or not target.startswith("beam_pipelines")):
                problems.append(f"{name} imports {target}{'' if top else ' (in a function)'}")
    assert problems == []


def test_transforms_never_import_the_pipelines() -> None:
    assert [f"{n} imports {t}" for n in MODULES if n.startswith("transforms")
            for t, _ in GRAPH[n] if t.startswith("beam_pipelines")] == []


def test_the_reader_imports_jax_and_tensorflow_on_call_only() -> None:
    assert [f"{n} imports {t}" for n in MODULES if n.startswith("easydata.reader")
            for t, top in GRAPH[n] if t.split(".")[0] in ("jax", "tensorflow") and top] == []


@pytest.mark.slow
@pytest.mark.parametrize("module", ["easydata", "easydata.reader"])
def test_importing_loads_neither_beam_nor_jax(module: str) -> None:
    code = (f"import sys, {module}; "
            "print(','.join(m for m in ('apache_beam', 'jax', 'tensorflow') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "", f"{module} imports {result.stdout.strip()}"


def test_the_package_imports_its_public_names_when_first_used() -> None:
    """`import easydata` is what every process of a run (the command, the local worker server) starts with: it
    imported the compatibility layer, its readers, fsspec and pyarrow (~0.4 s of a fresh process) before."""
    code = ("import sys, easydata; print(','.join(m for m in ('easydata.compat', 'easydata.reader', 'fsspec', "
            "'pyarrow', 'numpy') if m in sys.modules)); "
            "import easydata.api, easydata.config, easydata.errors, easydata.compat.sources as s; "
            "assert easydata.Pipeline is easydata.api.Pipeline and easydata.ConfigError is easydata.errors.ConfigError; "
            "assert easydata.PipelineConfig is easydata.config.PipelineConfig and easydata.JsonShardedSource is "
            "s.JsonShardedSource; "
            "assert all(getattr(easydata, n) is not None for n in easydata.__all__); "
            "assert set(easydata.__all__) <= set(dir(easydata)); "
            "exec('from easydata import *'); "
            "print(easydata.reader.__name__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["", "easydata.reader"]
    missing = subprocess.run([sys.executable, "-c", "import easydata; easydata.no_such_name"], capture_output=True,
                             text=True, cwd=ROOT)
    assert missing.returncode == 1 and "AttributeError: module 'easydata' has no attribute 'no_such_name'" in \
        missing.stderr, missing.stderr
