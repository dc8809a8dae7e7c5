"""The optional compiled build of the listener path (the rest is in pyproject.toml).

``pip install .`` compiles the modules of :data:`liveroom.build.COMPILED` with
mypyc, and those of :data:`liveroom.build.CYTHON` with Cython, when it can;
every module stays importable as pure Python beside its extension (a Cython
module stands for a pure one of another name). What decides:

- ``pip install -e .`` (editable) and ``LIVEROOM_BUILD=pure``: pure Python, no
  compiler or mypy needed (``build_backend.py`` does not even ask for mypy);
- otherwise mypy (mypyc) and Cython are fetched as build requirements, and without a C
  compiler, or when compiling fails, the install goes on in pure Python and
  says so in one line;
- ``LIVEROOM_BUILD=compiled``: compiling must succeed, else the install fails
  (what CI and packagers use to make sure they got the fast path).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

from build_backend import c_compiler  # beside this file (pyproject's backend-path)

HERE = Path(__file__).resolve().parent


def _modules(which: str = "COMPILED") -> tuple[str, ...]:
    """liveroom/build.py's COMPILED (mypyc) or CYTHON modules."""
    # liveroom/build.py is read, not imported: the package's dependencies are
    # not installed yet while it is built.
    namespace: dict[str, Any] = {}
    exec(compile((HERE / "liveroom" / "build.py").read_text(), "build.py", "exec"), namespace)
    return tuple(namespace[which])


def _say(line: str) -> None:
    print(f"liveroom: {line}", file=sys.stderr, flush=True)


class _BuildExt(build_ext):
    """Builds the extensions, or (unless a compiled build was required) goes
    on without them when the compiler fails: the wheel is pure Python then."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if _wanted() == "compiled":
                raise
            _say(f"compiling the listener path failed ({exc}); installing pure Python")
            for ext in self.extensions:  # none of an earlier build may be packaged
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.extensions = []


def _wanted() -> str:
    return os.environ.get("LIVEROOM_BUILD", "auto").strip().lower()


def _pure() -> dict[str, Any]:
    # A build directory of its own: a pure build never packages extensions a
    # compiled build left in build/.
    return {"options": {"build": {"build_base": "build/pure"}}}


def _extensions() -> dict[str, Any]:
    wanted = _wanted()
    if wanted not in ("auto", "pure", "compiled"):
        raise SystemExit(f"LIVEROOM_BUILD={wanted!r}: use auto, pure or compiled")
    building = any(cmd in sys.argv for cmd in ("bdist_wheel", "build_ext", "build", "install"))
    if wanted == "pure" or not building or "editable_wheel" in sys.argv:
        return _pure()
    if c_compiler() is None:
        if wanted == "compiled":
            raise SystemExit("LIVEROOM_BUILD=compiled but no C compiler was found (set CC)")
        _say("no C compiler found: installing pure Python (the listener path runs "
             "slower; install gcc and reinstall for the compiled build)")
        return _pure()
    try:
        from mypyc.build import mypycify
    except ImportError:
        if wanted == "compiled":
            raise SystemExit("LIVEROOM_BUILD=compiled needs mypy (mypyc) to build") from None
        _say("mypy (mypyc) is not installed: installing pure Python")
        return _pure()
    # Nothing of an earlier compiled build may be packaged: a module dropped
    # from the list would stay compiled, against an older shared library.
    shutil.rmtree(HERE / "build" / "wheel", ignore_errors=True)
    try:
        from Cython.Build import cythonize
    except ImportError:
        if wanted == "compiled":
            raise SystemExit("LIVEROOM_BUILD=compiled needs Cython to build") from None
        _say("Cython is not installed: installing pure Python")
        return _pure()
    paths = [name.replace(".", "/") + ".py" for name in _modules()]
    cython = _modules("CYTHON")
    _say(f"compiling {len(paths)} modules of the listener path with mypyc, "
         f"{len(cython)} with Cython")
    at_c_level = cythonize(
        [Extension(name, [name.replace(".", "/") + ".pyx"]) for name in cython],
        build_dir="build/cython", compiler_directives={"language_level": "3"}, quiet=True)
    return {"ext_modules": [*mypycify(paths, opt_level="3", target_dir="build/mypyc"),
                            *at_c_level],
            "cmdclass": {"build_ext": _BuildExt},
            "options": {"build": {"build_base": "build/wheel"}}}


setup(**_extensions())
