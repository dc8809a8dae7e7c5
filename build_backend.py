"""setuptools' build backend, asking for mypy and Cython only when a build may compile.

``pip install .`` builds a wheel: unless ``LIVEROOM_BUILD=pure``, it asks for
mypy and Cython (mypyc compiles the listener path, Cython its whole read, see
``setup.py``) and for the
project's dependencies (mypyc type-checks the modules it compiles against
them, as CI does). ``pip install -e .`` asks for nothing more than setuptools:
an editable install is pure Python.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the backend, unchanged)


def c_compiler() -> str | None:
    """The C compiler a build would use (``CC``, else Python's), if it is there."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0])


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    requires = list(_setuptools.get_requires_for_build_wheel(config_settings))
    wanted = os.environ.get("LIVEROOM_BUILD", "auto").strip().lower()
    if wanted == "pure" or (wanted == "auto" and c_compiler() is None):
        return requires  # setup.py says why it builds pure Python
    project = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["project"]
    return [*requires, "mypy>=1.10", "Cython>=3.0", *project["dependencies"]]
