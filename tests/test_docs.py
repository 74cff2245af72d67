"""The documentation holds together: every relative link resolves, the Quickstart's commands exist."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces to dashes)."""
    found, in_code = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^#{1,6} (.+)$", line)):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [link for link in _LINK.findall(text) if "://" not in link and not link.startswith("mailto:")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no heading '#{anchor}' in {path.name}")
    assert broken == []


def test_readme_is_short_and_links_every_docs_page() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    linked = {Path(link.partition("#")[0]).name for link in _links(REPO_ROOT / "README.md")}
    assert {p.name for p in (REPO_ROOT / "docs").glob("*.md")} <= linked


def test_the_quickstart_is_two_commands_that_exist() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands == ['pip install -e . && easydata run', 'pip install -e ".[dev]" && python -m pytest']
    setup = (REPO_ROOT / "setup.py").read_text(encoding="utf-8")
    assert '"easydata=easydata.cli:console_main"' in setup and '"dev": [' in setup
    assert shutil.which("easydata") is not None  # the console script the first line runs
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install --quiet -e .\neasydata run' in ci and 'pip install --quiet -e ".[dev]"\npython -m pytest' in ci


def _concept_rows() -> list[tuple[str, list[str]]]:
    """docs/architecture.md's concept table: (concept, the paths its module cell names). A path names the
    module (or folder) that owns the concept; other modules are referred to by dotted name."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Where each concept lives", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| concept")]
    return [(row.split(" | ")[0][2:], re.findall(r"`((?:easydata|transforms|beam_pipelines)/[\w/]*(?:\.py)?)`", row))
            for row in rows]


def test_the_architecture_names_modules_that_exist_and_every_module_has_one_concept_row() -> None:
    """Every path the concept table names exists, and every product module is owned by exactly one row: the
    row naming its path, else the one naming the nearest folder holding it."""
    rows = _concept_rows()
    assert len(rows) > 30
    missing = [path for _, paths in rows for path in paths if not (REPO_ROOT / path).exists()]
    assert missing == []
    modules = sorted(p.relative_to(REPO_ROOT).as_posix() for package in ("easydata", "transforms", "beam_pipelines")
                     for p in (REPO_ROOT / package).rglob("*.py") if p.name != "__init__.py")
    problems = []
    for module in modules:
        owners = {concept for concept, paths in rows if module in paths}
        if not owners:
            folders = [p for _, paths in rows for p in paths if p.endswith("/") and module.startswith(p)]
            nearest = max(folders, key=len, default=None)
            owners = {concept for concept, paths in rows if nearest in paths}
        if len(owners) != 1:
            problems.append(f"{module}: {sorted(owners) or 'no row'}")
    assert problems == []
