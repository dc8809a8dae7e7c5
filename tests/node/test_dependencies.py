"""What an install brings (issue 46): pyproject.toml's runtime dependencies
are exactly the distributions the shipped packages (liveroom, recvsvr,
statsvr, proxy) import, and what the tests import comes with the extras
``scripts/install-test-deps`` installs. A package only the tests use sits in
the ``test`` extra: datasketch, the reference of the viewers' HyperLogLog
(tests/stats/test_viewers.py), was a runtime dependency and brought 216 MB
of numpy and scipy to every production install, which no node imports."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("liveroom", "recvsvr", "statsvr", "proxy")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def imported_by(folders: Iterable[Path]) -> dict[str, str]:
    """The top-level names the Python files under ``folders`` import
    (absolute imports, standard library left out), each with one file that
    imports it."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "__future__":
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


@cache
def distributions_of(module: str) -> frozenset[str]:
    """The installed distributions that provide the top-level ``module``."""
    return frozenset(canonicalize_name(d)
                     for d in importlib.metadata.packages_distributions().get(module, ()))


def requirements(texts: Iterable[str], extra: str = "") -> list[Requirement]:
    """The requirements of ``texts`` that apply here (markers evaluated, for ``extra``)."""
    parsed = (Requirement(text) for text in texts)
    return [r for r in parsed if r.marker is None or r.marker.evaluate({"extra": extra})]


def installed_with(wanted: Iterable[Requirement]) -> set[str]:
    """The distributions ``wanted`` brings, theirs included (from the
    installed distributions' metadata)."""
    seen: set[tuple[str, str]] = set()
    todo = list(wanted)
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        for extra in ("", *requirement.extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            try:
                requires = importlib.metadata.requires(name) or []
            except importlib.metadata.PackageNotFoundError:
                continue
            todo += requirements(requires, extra)
    return {name for name, _ in seen}


def test_every_runtime_dependency_is_imported_by_a_shipped_package() -> None:
    imported = imported_by(ROOT / package for package in SHIPPED)
    unused = []
    for requirement in requirements(PROJECT["dependencies"]):
        name = canonicalize_name(requirement.name)
        if not any(name in distributions_of(module) for module in imported):
            unused.append(requirement.name)
    assert not unused, (f"runtime dependencies no shipped package imports: {unused}; "
                        "what only tests use goes in the test extra")


def test_every_distribution_a_shipped_package_imports_is_a_runtime_dependency() -> None:
    own = set(SHIPPED)
    declared = {canonicalize_name(r.name) for r in requirements(PROJECT["dependencies"])}
    missing = {module: where
               for module, where in imported_by(ROOT / package for package in SHIPPED).items()
               if module not in own and not distributions_of(module) & declared}
    assert not missing, f"imported but not a runtime dependency: {missing}"


def test_what_the_tests_import_comes_with_the_extras_the_set_up_installs() -> None:
    """``scripts/install-test-deps`` installs the project with some extras:
    everything a test imports must come with them (named there, or brought
    by what is), not only happen to be installed."""
    script = (ROOT / "scripts" / "install-test-deps").read_text()
    extras = re.search(r"pip install .* -e '\.\[([a-z,]+)\]'", script)
    assert extras, "install-test-deps installs no extras"
    wanted = requirements(PROJECT["dependencies"])
    for extra in extras.group(1).split(","):
        wanted += requirements(PROJECT["optional-dependencies"][extra])
    brought = installed_with(wanted)
    local = {path.stem for path in (ROOT / "tests").glob("*.py")} | set(SHIPPED)
    missing = {module: where
               for module, where in imported_by([ROOT / "tests"]).items()
               if module not in local and not distributions_of(module) & brought}
    assert not missing, f"imported by tests, not installed by the extras {extras.group(1)}: " \
                        f"{missing}"
