"""The Python client alone (issue 34): ``liveroom-client``, this repository's
second distribution (``clients/python``, built by its ``build_client.py``),
holds ``liveroom.client`` and what it imports of the core, nothing else of the
server; in an environment of its own, beside only the distributions it
requires, ``from liveroom.client import Client`` imports and talks to a node."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import clean_env, serve

import liveroom

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
SERVER_ONLY = ("proxy", "recvsvr", "statsvr", "redis", "hiredis", "msgpack", "orjson", "click",
               "prometheus_client", "datasketch", "numpy", "uvloop", "httptools", "jwt")


def load_backend(folder: Path, name: str = "build_client") -> ModuleType:
    """``folder``'s ``build_client.py``, imported under ``name``."""
    spec = importlib.util.spec_from_file_location(name, folder / "build_client.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_modules() -> set[str]:
    """The modules the client distribution installs, by import name."""
    paths = [p for p in load_backend(CLIENT).shipped(ROOT) if p.endswith(".py")]
    return {p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in paths}


def run(python: str | Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -I ARGS...`` run to its end, successfully (``-I``: neither the
    working folder nor ``PYTHONPATH`` is on its path)."""
    done = subprocess.run([str(python), "-I", *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def imported(python: str | Path, code: str, cwd: Path = ROOT) -> set[str]:
    """The modules ``python -X importtime -c CODE`` imports."""
    return {line.rsplit("|", 1)[1].strip()
            for line in run(python, "-X", "importtime", "-c", code, cwd=cwd).stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def of_liveroom(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "liveroom" or m.startswith("liveroom.")}


def test_it_ships_the_modules_the_client_imports_of_liveroom() -> None:
    # A client module that starts importing another module of the core fails
    # here: build_client.CORE must then name it (with what it imports).
    assert of_liveroom(imported(sys.executable, "import liveroom.client")) == shipped_modules()


def third_party_imports(path: Path) -> set[str]:
    """The top-level packages a module imports beyond the standard library and
    liveroom."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__", "liveroom"}


def declared(pyproject: Path) -> dict[str, Requirement]:
    requirements = map(Requirement, tomllib.loads(pyproject.read_text())["project"]
                       ["dependencies"])
    return {canonicalize_name(r.name): r for r in requirements}


def test_its_dependencies_are_what_the_client_imports_with_the_servers_bounds() -> None:
    imports = set().union(*(third_party_imports(ROOT / p)
                            for p in load_backend(CLIENT).shipped(ROOT) if p.endswith(".py")))
    owners = importlib.metadata.packages_distributions()
    needed = {canonicalize_name(dist) for name in imports for dist in owners[name]}
    client, server = declared(CLIENT / "pyproject.toml"), declared(ROOT / "pyproject.toml")
    assert set(client) == needed == {"aiohttp"}
    for name, requirement in client.items():
        assert str(requirement) == str(server[name])


def test_its_sdist_builds_the_same_wheel_as_the_repository(tmp_path: Path) -> None:
    tree = load_backend(CLIENT)
    sdist = tmp_path / tree.build_sdist(str(tmp_path))
    with tarfile.open(sdist) as archive:
        # The "data" filter came in 3.11.4 (Debian 12 has 3.11.2): our own
        # sdist, just built, needs no filter where there is none.
        if hasattr(tarfile, "data_filter"):
            archive.extractall(tmp_path / "unpacked", filter="data")
        else:
            archive.extractall(tmp_path / "unpacked")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    assert sorted(p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*")
                  if p.is_file()) == sorted(["PKG-INFO", "LICENSE", "README.md",
                                             "pyproject.toml", "build_client.py",
                                             *tree.shipped(ROOT)])
    (tmp_path / "from-tree").mkdir()
    (tmp_path / "from-sdist").mkdir()
    name = tree.build_wheel(str(tmp_path / "from-tree"))
    again = load_backend(unpacked, "build_client_of_the_sdist")
    assert again.source_tree() == unpacked
    assert again.build_wheel(str(tmp_path / "from-sdist")) == name
    assert (tmp_path / "from-sdist" / name).read_bytes() == \
           (tmp_path / "from-tree" / name).read_bytes()


def pip(*args: str) -> str:
    """This environment's pip (``--python`` picks the environment it acts on)."""
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          env=clean_env(), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def required(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The distributions of this environment that ``requirements`` install,
    theirs included, as pip would resolve them here."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(Requirement(r), frozenset({""})) for r in requirements]
    while todo:
        requirement, extras = todo.pop()
        marker = requirement.marker
        if marker and not any(marker.evaluate({"extra": e}) for e in extras):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found[name] = dist = importlib.metadata.distribution(name)
        assert requirement.specifier.contains(dist.version, prereleases=True), requirement
        todo += [(Requirement(r), frozenset({"", *requirement.extras}))
                 for r in dist.requires or ()]
    return list(found.values())


def copy_installed(dist: importlib.metadata.Distribution, site: Path) -> None:
    """Install ``dist`` into ``site`` from this environment: its files as
    installed here (``RECORD`` included), its scripts left out."""
    assert dist.files is not None, dist.metadata["Name"]
    for file in dist.files:
        if file.parts[0] == ".." or "__pycache__" in file.parts:
            continue
        (site / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(str(dist.locate_file(file))), site / file)


TALK = """\
import asyncio, sys
from liveroom.client import Client

async def main() -> None:
    async with Client(sys.argv[1]) as client:
        await client.send("demo", {"text": "hello"}, uid="bob")
        async for answer in client.listen("demo", uid="alice"):
            for message in answer.delivered:
                print(message.seq, message.uid, message.body["text"])
            break

asyncio.run(main())
"""


@pytest.mark.slow
def test_its_wheel_alone_gives_the_client_in_a_new_environment(tmp_path: Path) -> None:
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(CLIENT))
    (wheel,) = (tmp_path / "dist").iterdir()
    assert wheel.name == f"liveroom_client-{liveroom.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = f"liveroom_client-{liveroom.__version__}.dist-info"
        meta = archive.read(f"{dist_info}/METADATA").decode()
        files = {n: archive.read(n) for n in names if not n.startswith(dist_info)}
    assert sorted(files) == sorted(load_backend(CLIENT).shipped(ROOT))
    assert {n.split("/")[0] for n in names} == {"liveroom", dist_info}
    assert all((ROOT / n).read_bytes() == data for n, data in files.items())  # the same files
    headers = dict(line.split(": ", 1) for line in meta.split("\n\n")[0].splitlines()
                   if not line.startswith("Requires-Dist"))
    assert (headers["Name"], headers["Version"]) == ("liveroom-client", liveroom.__version__)
    requires = [line.split(": ", 1)[1] for line in meta.splitlines()
                if line.startswith("Requires-Dist: ")]
    assert requires == [str(r) for r in declared(CLIENT / "pyproject.toml").values()]

    # A new environment (no pip, nothing of this one's), the wheel installed by
    # pip and what it requires copied from here: pip check says it is complete.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    pip("--python", str(python), "install", "--no-index", "--no-deps", str(wheel))
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    cwd=tmp_path).stdout.strip())
    dependencies = required(requires)
    for dist in dependencies:
        copy_installed(dist, site)
    assert "No broken requirements found." in pip("--python", str(python), "check")
    listed = {canonicalize_name(d["name"])
              for d in json.loads(pip("--python", str(python), "list", "--format=json"))}
    assert listed == {"liveroom-client", *(canonicalize_name(d.metadata["Name"])
                                           for d in dependencies)}
    assert not listed & {canonicalize_name(n) for n in SERVER_ONLY}

    # It imports from there (never from this checkout: -I, run elsewhere), the
    # modules it ships, and talks to a node.
    where = run(python, "-c", "import liveroom.client as c; print(c.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()) == site / "liveroom" / "client" / "__init__.py"
    modules = imported(python, "from liveroom.client import Client", cwd=tmp_path)
    assert of_liveroom(modules) == shipped_modules()
    assert not {m.split(".")[0] for m in modules} & set(SERVER_ONLY)
    (tmp_path / "talk.py").write_text(TALK)
    with serve() as (url, _):
        assert run(python, str(tmp_path / "talk.py"), url, cwd=tmp_path).stdout == "1 bob hello\n"
