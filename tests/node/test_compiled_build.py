"""The two builds of the listener path: pure Python (the reference) and
compiled by mypyc.

``scripts/test`` builds the compiled tree first (``scripts/build-compiled``,
the way ``pip install .`` builds it), runs the whole suite on the pure build,
then the listener suites again with the compiled tree first on the path
(``LIVEROOM_TEST_BUILD=compiled``). These tests check that each run imports
the build it says, that both builds answer the same bytes to the same
requests, and that an install without a C compiler is pure Python and says
so.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from support import ADMIN, free_port

from liveroom import __version__, build

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = ROOT / "tests" / "transcript.py"


def _tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled tree: scripts/test's (``LIVEROOM_COMPILED_TREE``), else
    one built now (about a minute)."""
    given = os.environ.get("LIVEROOM_COMPILED_TREE")
    if given:
        return Path(given)
    tree = tmp_path_factory.mktemp("compiled") / "tree"
    subprocess.run([str(ROOT / "scripts" / "build-compiled"), str(tree)], check=True,
                   timeout=600)
    return tree


def _under(path: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with ``path`` first on the import path and nothing from
    the current directory."""
    env = {**os.environ, "PYTHONPATH": str(path), "PYTHONSAFEPATH": "1"}
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, timeout=120,
                          cwd=ROOT, check=False)


def test_this_run_imports_the_build_it_names() -> None:
    wanted = os.environ.get("LIVEROOM_TEST_BUILD", "pure")
    for name in build.COMPILED:
        importlib.import_module(name)
    assert build.kind() == wanted, build.describe()
    compiled = build.compiled_modules()
    assert compiled == (list(build.COMPILED) if wanted == "compiled" else [])
    # The whole read and the senders' tallies at C level (Cython) are the
    # compiled build's, and their takers take them; the pure build runs the
    # reference.
    from liveroom import ratelimit
    from liveroom.store.memory import log
    from proxy.front import reader, whole
    assert build.cython_modules() == (list(build.CYTHON) if wanted == "compiled" else [])
    at_c_level = reader.WHOLE_READ is not whole.read_whole
    assert at_c_level == (wanted == "compiled")
    assert (log._TALLY is not ratelimit.ListTally) == (wanted == "compiled")


def test_the_settings_a_node_hands_its_workers_pickle_on_this_build() -> None:
    """``--workers`` pickles the settings for each worker: a compiled frozen
    class refused the restore (every worker of a compiled build exited, found
    walking the production steps)."""
    import pickle

    from liveroom.ratelimit import RateLimits, Window
    from liveroom.settings import Settings

    settings = Settings(rate_limits=RateLimits(per_uid=(Window(5, 1), Window(30, 60)),
                                               room_per_second=50))
    assert pickle.loads(pickle.dumps(settings)) == settings


def test_serve_says_which_build_it_runs_on_its_start_line_and_in_its_metrics() -> None:
    wanted = os.environ.get("LIVEROOM_TEST_BUILD", "pure")
    port = free_port()
    env = {**os.environ, "LIVEROOM_ADMIN_TOKEN": ADMIN}
    proc = subprocess.Popen([sys.executable, "-m", "liveroom", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        lines = [next(proc.stdout) for _ in range(2)]  # bounded by the test's timeout
        assert "listening on" in lines[0], lines
        said = ("  build: pure Python build\n" if wanted == "pure" else
                f"  build: compiled build ({len(build.COMPILED)} of {len(build.COMPILED)} "
                f"modules compiled by mypyc, {len(build.CYTHON)} of {len(build.CYTHON)} by "
                "Cython)\n")
        assert lines[1] == said
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Authorization": f"Bearer {ADMIN}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            metrics = answer.read().decode()
        assert (f'liveroom_build_info{{build="{wanted}",version="{__version__}"}} 1.0'
                in metrics.splitlines())
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.slow
@pytest.mark.timeout(600)  # builds the compiled tree when scripts/test did not
def test_both_builds_answer_the_same_bytes(tmp_path_factory: pytest.TempPathFactory) -> None:
    tree = _tree(tmp_path_factory)
    pure = _under(ROOT, str(TRANSCRIPT))
    compiled = _under(tree, str(TRANSCRIPT))
    assert pure.returncode == 0, pure.stderr.decode()
    assert compiled.returncode == 0, compiled.stderr.decode()
    # Each run really was the build it stands for.
    probe = "from liveroom import build; import proxy.front.server; print(build.kind())"
    assert _under(ROOT, "-c", probe).stdout.split() == [b"pure"]
    assert _under(tree, "-c", probe).stdout.split() == [b"compiled"]
    answers = pure.stdout.split(b"\n== ")
    assert len(answers) > 60
    for mine, theirs in zip(answers, compiled.stdout.split(b"\n== "), strict=True):
        assert mine == theirs


@pytest.mark.slow
@pytest.mark.timeout(600)  # pip makes its build environment (setuptools) first
def test_an_install_without_a_compiler_is_pure_python_and_says_so(tmp_path: Path) -> None:
    target = tmp_path / "site"
    env = {**os.environ, "CC": "no-such-compiler", "LIVEROOM_BUILD": "auto"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--target", str(target),
         str(ROOT)],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line.strip() for line in (done.stdout + done.stderr).splitlines()
            if line.strip().startswith("liveroom: ")]
    assert said == ["liveroom: no C compiler found: installing pure Python (the listener "
                    "path runs slower; install gcc and reinstall for the compiled build)"]
    assert not list(target.rglob("*.so"))
    assert (target / "proxy" / "front" / "server.py").is_file()
