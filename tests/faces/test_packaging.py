"""What a newcomer meets first: the version in one place, the license and the
changelog, the npm package of liveroom.js and its Node example, CLI commands
that start fast (each importing what it needs: a node no numpy or scipy,
``ticket`` no aiohttp, ``send`` and ``listen`` nothing of the server), and
documentation without dangling references."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support import ADMIN, PUBLISHER, clean_env, free_port, running_node, serve

import liveroom

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "proxy" / "static"
HEAVY = ("datasketch", "numpy", "scipy", "statsvr", "recvsvr")


def test_the_version_is_written_once_and_said_everywhere() -> None:
    version = liveroom.__version__
    assert importlib.metadata.version("liveroom") == version
    assert json.loads((STATIC / "package.json").read_text())["version"] == version
    assert f"## {version} " in (ROOT / "CHANGELOG.md").read_text()
    assert not re.search(r'^version = "', (ROOT / "pyproject.toml").read_text(), re.M)
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def imported_by(*code: str) -> set[str]:
    return run_importing(*code)[1]


def run_importing(*code: str) -> tuple[str, set[str]]:
    """Run ``python -X importtime CODE...`` to its end: its output and the
    modules it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", *code], env=clean_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, modules_in(done.stderr)


def modules_in(importtime: str) -> set[str]:
    """The modules ``-X importtime`` reported on stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines()
            if line.startswith("import time:") and "|" in line}


def among(modules: set[str], *names: str) -> list[str]:
    """The ``modules`` that are one of ``names`` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("args", [
    ["--help"], ["send", "--help"], ["listen", "--help"], ["vip", "list", "--help"],
    ["room", "start", "--help"], ["secrets"], ["ticket", "--help"],
])
def test_commands_that_do_not_serve_import_no_role_and_no_numpy(args: list[str]) -> None:
    modules = imported_by("-m", "liveroom", *args)
    assert "liveroom.cli" in modules
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, heavy


# -- what each command starts with (issue 33) ----------------------------------------

NUMERIC = ("numpy", "scipy", "datasketch")
"""datasketch's dependencies, most of a node's start-up before issue 33; its
HyperLogLog is the tests' reference (tests/stats/test_viewers.py), never a node's."""
SERVER = ("proxy", "recvsvr", "statsvr", "liveroom.node", "liveroom.store", "liveroom.workers",
          "liveroom.whitelist", "liveroom.metrics", "prometheus_client", "redis", "aiohttp.web")
"""What only a server needs: the roles, the node, the store and its engines, the
vip list and the metrics."""
TICKET_KEY = "a-ticket-key-of-the-tests-0123456789"


def test_a_node_imports_neither_numpy_nor_scipy() -> None:
    modules = imported_by("-c", "import liveroom.node")
    assert "statsvr.viewers" in modules
    assert not among(modules, *NUMERIC), among(modules, *NUMERIC)


def test_a_node_serving_has_imported_neither_numpy_nor_scipy(tmp_path: Path) -> None:
    report = tmp_path / "importtime"
    with serve_importing(report) as (url, proc):
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    modules = modules_in(report.read_text())
    assert {"statsvr.viewers", "proxy.front.server", "uvloop"} <= modules
    assert not among(modules, *NUMERIC), among(modules, *NUMERIC)


def test_a_started_node_collects_again_with_its_start_up_frozen() -> None:
    # node.run starts with the collector off (as `liveroom serve` imports the
    # node with it off); it must be on again once the node listens.
    code = ("import gc, os, signal\n"
            "from liveroom.node import run\n"
            "from liveroom.settings import Settings\n"
            "def said(node):\n"
            "    print(gc.isenabled(), gc.get_freeze_count() > 10_000, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            f"run(Settings(port={free_port()}), announce=said)\n"
            "print(gc.isenabled())\n")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


@contextlib.contextmanager
def serve_importing(report: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -X importtime -m liveroom serve`` on a free port, its import
    report written to ``report``, once it answers ``/healthz``: its URL and
    process."""
    port = free_port()
    with report.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "liveroom", "serve", "--port", str(port),
             "--log-level", "warning"], env=clean_env(), stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not answers(f"{url}/healthz"):
            assert proc.poll() is None, f"serve exited: {report.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "serve did not answer /healthz in 30 s"
            time.sleep(0.05)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:  # refused: not listening yet
        return False


def test_ticket_signs_without_aiohttp() -> None:
    out, modules = run_importing("-m", "liveroom", "ticket", "--key", TICKET_KEY,
                                 "--uid", "u1", "--room", "r1")
    assert out.count(".") == 2  # a JWT: header.claims.signature
    assert "proxy.tickets" in modules
    assert not among(modules, "aiohttp", "statsvr", "recvsvr"), among(modules, "aiohttp")


def test_send_and_listen_load_nothing_of_the_server() -> None:
    with serve() as (url, _):
        out, modules = run_importing("-m", "liveroom", "send", "r1", "hello", "--uid", "s1",
                                     "--url", url)
        assert out.strip() == "1"
        assert "liveroom.client" in modules
        assert not among(modules, *SERVER), among(modules, *SERVER)

        listen = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "liveroom", "listen", "r1", "--uid", "l1",
             "--url", url], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        try:
            assert listen.stdout is not None
            assert listen.stdout.readline() == "1 s1: hello\n"  # bounded by the test's timeout
            listen.send_signal(signal.SIGTERM)
            _, importtime = listen.communicate(timeout=30)
        finally:
            if listen.poll() is None:
                listen.kill()
                listen.communicate(timeout=30)
        assert listen.returncode == 0, importtime[-2000:]
        modules = modules_in(importtime)
        assert "liveroom.client" in modules
        assert not among(modules, *SERVER), among(modules, *SERVER)


def test_the_python_client_imports_on_its_own() -> None:
    modules = imported_by("-c", "import liveroom.client")
    near = sorted(m for m in modules if m.split(".")[0] in (*HEAVY, "proxy")
                  or m.startswith("liveroom.store") or m in ("liveroom.node", "liveroom.cli"))
    assert not near, near


@pytest.mark.node
def test_npm_packs_liveroom_js_with_its_typings(tmp_path: Path) -> None:
    done = subprocess.run(["npm", "pack", "--dry-run", "--json", "--cache", str(tmp_path)],
                          cwd=STATIC, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (packed,) = json.loads(done.stdout)
    assert (packed["name"], packed["version"]) == ("liveroom", liveroom.__version__)
    assert sorted(f["path"] for f in packed["files"]) == [
        "liveroom.d.ts", "liveroom.js", "package.json"]


@pytest.mark.node
async def test_the_node_example_runs_as_written() -> None:
    async with running_node() as node, aiohttp.ClientSession() as session:
        proc = await asyncio.create_subprocess_exec(
            "node", "examples/node-listen.mjs", cwd=ROOT,
            env=clean_env(LIVEROOM_URL=node.url),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert re.fullmatch(r"1 node-\d+: hi from node-\d+\n", out.decode()), out
        assert "-- sent seq 1 to demo" in err.decode()
        # The manifest sits beside the assets but is not one of them.
        async with session.get(f"{node.url}/static/package.json") as resp:
            assert resp.status == 404


# -- the documentation ------------------------------------------------------------

DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "loadtest" / "README.md",
               *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    # The two commands, as a fresh Debian machine needs them.
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && " \
           "liveroom serve" in text
    assert "\nscripts/test\n" in text


def tour_steps() -> list[tuple[str, list[str]]]:
    """The README's tour ("Five minutes with it"): its shell commands in
    order, each (a continued line joined) with the comment lines below it."""
    text = (ROOT / "README.md").read_text()
    section = re.split(r"^## ", text.split("\n## Five minutes with it\n", 1)[1], maxsplit=1,
                       flags=re.M)[0]
    steps: list[tuple[str, list[str]]] = []
    for _, block in re.findall(r"^( *)```sh\n(.*?)^\1```", section, re.S | re.M):
        command = ""
        for line in textwrap.dedent(block).splitlines():
            if line.startswith("#"):
                steps[-1][1].append(line[1:].strip())
                continue
            command += line.split("  # ")[0].rstrip()  # its own comment, if any
            if command.endswith("\\"):
                command = command[:-1]
            else:
                steps.append((command, []))
                command = ""
    return steps


def answer_pattern(comment: str) -> tuple[int | None, Any] | None:
    """A comment showing an answer (``[STATUS ]{...}``, then prose): its
    status if shown and its body, where ``"..."`` and ``[...]`` stand for any
    value and a ``...`` member for any other members; None for prose."""
    found = re.fullmatch(r"(?:(\d{3}) )?(\{.*)", comment)
    if not found:
        return None
    text = found.group(2).replace("[...]", '"..."')
    text = re.sub(r"(?<=[{,])\s*\.\.\.\s*(?=[,}])", ' "...": "..."', text)
    body, _ = json.JSONDecoder().raw_decode(text)
    return (int(found.group(1)) if found.group(1) else None), body


def matches(pattern: Any, value: Any) -> bool:
    if pattern == "...":
        return True
    if isinstance(pattern, dict):
        keys = set(pattern) - {"..."}
        return (isinstance(value, dict) and keys <= set(value)
                and ("..." in pattern or keys == set(value))
                and all(matches(pattern[key], value[key]) for key in keys))
    if isinstance(pattern, list):
        return (isinstance(value, list) and len(pattern) == len(value)
                and all(map(matches, pattern, value)))
    return type(pattern) is type(value) and bool(pattern == value)


@pytest.mark.slow
async def test_the_readmes_tour_does_what_it_says() -> None:
    """The tour pasted in order on a fresh ``liveroom serve`` (its tokens
    exported): alice's listener, the ``liveroom`` commands (a send prints its
    seq), then the curls, each answering what its comment shows (``...`` any
    value; a GET asked again for up to 5 s: a poll counts online within a
    second), and the lines alice's listener prints, her personal messages
    among them. Before issue 46 the README showed a first poll bringing an
    important message and ``"iseq": 1``, and its personal messages went to an
    alice who was not listening yet."""
    (listen, _), *steps = tour_steps()
    assert shlex.split(listen, comments=True) == ["liveroom", "listen", "demo", "--uid", "alice"]
    with serve() as (url, _):
        env = clean_env(LIVEROOM_URL=url, LIVEROOM_ADMIN_TOKEN=ADMIN,
                        LIVEROOM_PUBLISHER_TOKEN=PUBLISHER)
        listener = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "liveroom", *shlex.split(listen, comments=True)[1:], cwd=ROOT,
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        assert listener.stdout is not None
        printed: list[str] = []

        async def prints(text: str) -> None:
            """Until alice's listener has printed a line starting with ``text``."""
            async with asyncio.timeout(10):
                while not any(line.startswith(text) for line in printed):
                    line = await listener.stdout.readline()  # type: ignore[union-attr]
                    assert line, f"the listener stopped: {printed}"
                    printed.append(line.decode().rstrip("\n"))

        async def shell(command: str) -> str:
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", command, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, (command, err.decode())
            return out.decode()

        try:
            await prints("-- listening to demo")
            seq = 0
            for command, comments in steps:
                argv = shlex.split(command, comments=True)
                if argv[0] == "liveroom":
                    out = await shell(shlex.join([sys.executable, "-m", *argv]))
                    if argv[1] == "send" and "--to" in argv:
                        await prints(f"p1 [to {argv[argv.index('--to') + 1]}] ")
                    elif argv[1] == "send":
                        seq += 1
                        assert out == f"{seq}\n", (command, out)
                    continue
                assert argv[0] == "curl", command
                asked = command.replace("http://127.0.0.1:8080", url) + " -s -w '\\n%{http_code}'"
                shown = [found for found in map(answer_pattern, comments) if found]
                assert len(shown) <= 1, comments
                status, pattern = shown[0] if shown else (None, "...")
                # A GET may be asked again (a poll counts online within a second).
                deadline = time.monotonic() + (0 if "-X POST" in command else 5)
                while True:
                    body, code = (await shell(asked)).rsplit("\n", 1)
                    if ((status in (None, int(code)) and matches(pattern, json.loads(body)))
                            or time.monotonic() >= deadline):
                        break
                    await asyncio.sleep(0.1)
                assert status in (None, int(code)), (command, code, body)
                assert matches(pattern, json.loads(body)), (command, shown, body)
                for comment in comments:
                    if comment.startswith("alice's listener prints: "):
                        await prints(comment.removeprefix("alice's listener prints: "))
        finally:
            listener.terminate()
            await listener.wait()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_the_docs_resolves(doc: Path) -> None:
    text = doc.read_text()
    # No code block holds a link; strip them so their brackets are not read as one.
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in LINK.findall(prose):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{doc.name}: {target} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{doc.name}: no heading for #{anchor} in {path.name}"


SECTION = re.compile(r'"([^"\n]+)" (below|above)\b')


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name != "CHANGELOG.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_section_named_below_or_above_is_a_heading_there(doc: Path) -> None:
    """A ``"Name" below`` (or ``above``) in prose names a heading of the same
    file, on that side of it (a section in another file takes a link)."""
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    headings = [(m.start(), m.group(1).replace("`", ""))
                for m in re.finditer(r"^#+ (.+)$", text, re.M)]
    for found in SECTION.finditer(text):
        name, side = found.group(1), found.group(2)
        there = [at for at, heading in headings if heading == name
                 and (at > found.start() if side == "below" else at < found.start())]
        assert there, f'{doc.name}: no heading "{name}" {side} offset {found.start()}'


def test_nothing_points_to_files_outside_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for name in tracked:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".json", ".js", ".ts", ".html", ".toml", ".conf",
                               ".yml", ".mjs", ".service", ".env") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        assert "DESIGN.md" not in text or name == "tests/faces/test_packaging.py", name
        assert "seeds/" not in text or name == "tests/faces/test_packaging.py", name


BENCHMARKS = sorted(p for p in (ROOT / "loadtest").glob("*.py")
                    if p.name.startswith(("bench_", "sim_", "sizing")))
"""The scripts under loadtest/ the docs give commands for."""


async def test_every_benchmark_explains_itself_with_help() -> None:
    """Each script under loadtest/ that the docs give a command for answers
    ``--help`` (a benchmark whose import broke, as bench_stalled.py's did
    when bench_hostile.py was rewritten under it, fails here, not in a
    reader's shell). They run together: each is an import and a print."""
    root = ROOT
    scripts = BENCHMARKS
    assert len(scripts) >= 20

    async def help_of(script: Path) -> tuple[str, int, bytes]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), "--help", cwd=root / "loadtest",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode is not None
        return script.name, proc.returncode, out if proc.returncode == 0 else err

    async with asyncio.timeout(120):
        answers = await asyncio.gather(*map(help_of, scripts))
    failed = {name: text.decode()[-300:] for name, code, text in answers if code != 0}
    assert failed == {}
    assert all(b"usage:" in text for _, _, text in answers)
