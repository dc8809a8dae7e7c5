"""The build backend of ``liveroom-client``: the Python client alone, from the
repository's own ``liveroom/`` (PEP 517; the standard library only).

The distribution holds what ``import liveroom.client`` loads of liveroom and
nothing more (:func:`shipped`): the package ``liveroom.client`` whole, and of
the core the version (``liveroom/__init__.py``), the name rule the client checks
names with (``liveroom/model.py`` and the errors it raises,
``liveroom/errors.py``) and ``py.typed``, each copied unchanged from the tree
the server distribution is built from. Its version is ``liveroom.__version__``,
read from that tree; its name, summary and dependencies are this folder's
``pyproject.toml``.

Its import name is the server's, so that the documentation's ``from
liveroom.client import Client`` holds for both, and the two distributions own
the same files (``liveroom/__init__.py`` and the rest of :func:`shipped`):
an environment has one or the other, never both. The server distribution
includes the client; installing both overwrites the same bytes (at one version)
but uninstalling either removes files the other needs.

The files come from the liveroom source tree two folders up from here, or from
the ``liveroom/`` beside this file in an unpacked sdist of this distribution
(:func:`build_sdist` puts them there). pip builds a local folder where it lies,
so ``pip install clients/python`` finds the tree. There is no editable build:
develop with the server's ``pip install -e .``, which has the client.

Written by hand rather than on setuptools: setuptools packages the files of
its own project folder, not a few modules of a package two folders up, and
before 70.1 it needs the ``wheel`` package (which a new venv lacks) to make a
wheel at all. A pure-Python wheel is a zip of the files, its metadata and a
record of their hashes (PEP 427). Both archives are reproducible:
their timestamps are fixed, so a build from the tree and one from its sdist
are the same bytes.
"""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import io
import re
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORE = ("__init__.py", "py.typed", "errors.py", "model.py")
"""What the client imports of the core (tests/faces/test_client_package.py checks it),
besides ``liveroom/client/`` itself."""
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say


def source_tree() -> Path:
    """The folder whose ``liveroom/`` and ``LICENSE`` are packaged: an unpacked
    sdist (this folder), else the repository (two folders up)."""
    for tree in (HERE, HERE.parent.parent):
        if (tree / "liveroom" / "client" / "__init__.py").is_file():
            return tree
    raise RuntimeError(f"liveroom-client: no liveroom/client/ in {HERE} nor two folders up: "
                       "build it from a liveroom checkout (clients/python) or from its sdist")


def shipped(tree: Path) -> list[str]:
    """The paths, relative to ``tree``, of the files the wheel installs."""
    client = (tree / "liveroom" / "client").glob("*.py")
    return [f"liveroom/{name}" for name in CORE] + sorted(
        p.relative_to(tree).as_posix() for p in client)


def version(tree: Path) -> str:
    """``liveroom.__version__``, read (not imported) from ``tree``."""
    module = ast.parse((tree / "liveroom" / "__init__.py").read_text())
    for node in module.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__version__"):
            return str(ast.literal_eval(node.value))
    raise RuntimeError(f"liveroom-client: no __version__ in {tree / 'liveroom' / '__init__.py'}")


def project() -> dict[str, Any]:
    """This folder's ``[project]`` table."""
    table: dict[str, Any] = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    if table.get("dynamic") != ["version"]:
        raise RuntimeError("liveroom-client: pyproject.toml: only the version is dynamic")
    return table


def metadata(tree: Path) -> str:
    """The core metadata (``METADATA`` in the wheel, ``PKG-INFO`` in the sdist)."""
    table = project()
    lines = ["Metadata-Version: 2.1", f"Name: {table['name']}", f"Version: {version(tree)}",
             f"Summary: {table['description']}", f"License: {table['license']['text']}",
             f"Requires-Python: {table['requires-python']}",
             *(f"Requires-Dist: {dep}" for dep in table["dependencies"]),
             "Description-Content-Type: text/markdown"]
    return "\n".join(lines) + "\n\n" + (HERE / str(table["readme"])).read_text()


def stem(tree: Path) -> str:
    """``liveroom_client-VERSION``: the archives' names without their suffix."""
    return f"{re.sub(r'[-_.]+', '_', project()['name']).lower()}-{version(tree)}"


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """Write ``liveroom_client-VERSION-py3-none-any.whl`` into ``wheel_directory``;
    its file name."""
    tree = source_tree()
    dist_info = f"{stem(tree)}.dist-info"
    files = [(path, (tree / path).read_bytes()) for path in shipped(tree)]
    files += [
        (f"{dist_info}/METADATA", metadata(tree).encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: liveroom-client build_client\n"
                               b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist_info}/LICENSE", (tree / "LICENSE").read_bytes()),
    ]
    record = [record_line(path, data) for path, data in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"{stem(tree)}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as wheel:
        for path, data in files:
            info = zipfile.ZipInfo(path, ZIP_TIME)
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data, zipfile.ZIP_DEFLATED)
    return name


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """Write ``liveroom_client-VERSION.tar.gz`` into ``sdist_directory``: this
    folder's files and the shipped ones, so that it builds the same wheel; its
    file name."""
    tree = source_tree()
    top = stem(tree)
    own = ("pyproject.toml", "build_client.py", project()["readme"])
    files = [(name, (HERE / name).read_bytes()) for name in own]
    files += [(path, (tree / path).read_bytes()) for path in ("LICENSE", *shipped(tree))]
    files.append(("PKG-INFO", metadata(tree).encode()))
    name = f"{top}.tar.gz"
    with (open(Path(sdist_directory) / name, "wb") as out,
          gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz,
          tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar):
        for path, data in sorted(files):
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return name


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []
