"""The compiled builds a server may run from, beside the checkout's pure one.

A compiled tree is the project installed by scripts/build-compiled (``pip
install --no-deps --target DIR .``, its modules built by mypyc); a server runs
from it with ``compiled_env(DIR)``: the tree first on the path, and not the
checkout's sources. ``check_compiled_tree`` makes sure ``proxy.front.server`` imports
from there as an extension module before any figure is taken.
``build_floors`` builds the floors a run asks for (:data:`BUILT_FLOORS`), each
in a temporary directory: the Python floor (loadtest/floor_server.py) with
mypyc (``build_floor``), the floor at C level (loadtest/floor_c.pyx) with
Cython, as pip builds liveroom's own Cython modules (``build_floor_c``: Cython
fetched into the build's own environment).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from kit import LOADTEST, REPO
from kit.progress import say

BUILD_COMPILED = "scripts/build-compiled"


def add_compiled_tree(parser: argparse.ArgumentParser) -> None:
    """``--compiled-tree DIR``: run the server from a compiled tree, not the
    checkout's pure build (read back with :func:`server_env`)."""
    parser.add_argument("--compiled-tree", type=Path, default=None, metavar="DIR",
                        help="run the compiled build from DIR (made by scripts/build-compiled "
                        "DIR) instead of the pure one")


def server_env(tree: Path | None) -> dict[str, str] | None:
    """The environment that runs the server from ``tree`` (checked to be a
    compiled tree), or None for the pure build."""
    if tree is None:
        return None
    tree = tree.resolve()
    check_compiled_tree(tree)
    return compiled_env(tree)


def compiled_env(tree: Path) -> dict[str, str]:
    """The environment that runs a process from a compiled tree: the tree first
    on the path, and not the current directory (the checkout, with the sources)."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


def compiled_module(tree: Path, module: str) -> str | None:
    """None when ``module`` imports from ``tree`` as an extension module (a .so
    mypyc built) in ``compiled_env(tree)``, run from the checkout as the servers
    are; else what it imports instead (its file, or the error)."""
    done = subprocess.run([sys.executable, "-c", f"import {module}; print({module}.__file__)"],
                          cwd=REPO, env=os.environ | compiled_env(tree), capture_output=True,
                          text=True, check=False)
    found = done.stdout.strip()
    if done.returncode == 0 and found.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return None
    return found if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def check_compiled_tree(tree: Path) -> None:
    if not tree.is_dir():
        raise RuntimeError(f"no compiled tree at {tree}: build one with {BUILD_COMPILED} "
                           "(or give --compiled-tree DIR)")
    if (found := compiled_module(tree, "proxy.front.server")) is not None:
        raise RuntimeError(f"{tree} is not a compiled tree (proxy.front.server there is {found}): "
                           f"build one with {BUILD_COMPILED} (or give --compiled-tree DIR)")


FLOOR_C_SETUP = """\
from Cython.Build import cythonize
from setuptools import setup

setup(name="floor-c", version="0", ext_modules=cythonize(["floor_c.pyx"], quiet=True))
"""
FLOOR_C_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61", "Cython>=3.0"]
build-backend = "setuptools.build_meta"
"""


def build_floor_c(into: Path) -> None:
    """floor_c.pyx built by Cython and installed in ``into`` (``pip install
    --no-deps --target``: pip fetches Cython into the build's environment,
    nothing is added to this one)."""
    source = into / "src"
    source.mkdir()
    shutil.copy(LOADTEST / "floor_c.pyx", source)
    (source / "setup.py").write_text(FLOOR_C_SETUP)
    (source / "pyproject.toml").write_text(FLOOR_C_PYPROJECT)
    say("floor-c", "build", f"pip install --target {into} (Cython) of floor_c.pyx")
    _build(["-m", "pip", "install", "--quiet", "--no-deps", "--target", str(into), str(source)],
           into, "floor_c", "Cython could not build floor_c.pyx")


def build_floor(into: Path) -> None:
    """floor_server.py compiled by mypyc in ``into``, the .so beside the copy."""
    shutil.copy(LOADTEST / "floor_server.py", into)
    say("floor-compiled", "build", f"python -m mypyc floor_server.py in {into}")
    _build(["-m", "mypyc", "floor_server.py"], into, "floor_server",
           "mypyc could not compile floor_server.py")


def _build(args: list[str], into: Path, module: str, failed: str) -> None:
    """Run ``python ARGS`` in ``into``; then ``module`` must import from there
    as an extension module. RuntimeError with the build's last lines if not."""
    done = subprocess.run([sys.executable, *args], cwd=into, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{failed}:\n{tail}")
    if (found := compiled_module(into, module)) is not None:
        raise RuntimeError(f"{module} does not import from {into} as an extension module: "
                           f"{found}")


BUILT_FLOORS: dict[str, tuple[Callable[[Path], None], str]] = {
    "floor-compiled": (build_floor, "floor_server"),
    "floor-c": (build_floor_c, "floor_c"),
}
"""The floors built for a run, by server name: how each is built, and the
module its server imports from the build (``main()`` starts it)."""


def build_floors(servers: Iterable[str], stack: contextlib.ExitStack,
                 prefix: str) -> dict[str, Path]:
    """Each built floor among ``servers``, built once in a temporary
    directory that ``stack`` removes: its directory, by server name."""
    builds: dict[str, Path] = {}
    for name in dict.fromkeys(servers):
        if name in BUILT_FLOORS:
            builds[name] = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix=f"{prefix}-{name}-")))
            BUILT_FLOORS[name][0](builds[name])
    return builds
