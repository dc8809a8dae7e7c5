"""The ``liveroom`` command: its help, its refusals, and the real process
serving, announcing its tokens and stopping cleanly on a signal."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from liveroom import __version__
from liveroom.cli import main

OPTIONS = {
    "--host": "LIVEROOM_HOST",
    "--port": "LIVEROOM_PORT",
    "--store": "LIVEROOM_STORE",
    "--admin-token": "LIVEROOM_ADMIN_TOKEN",
    "--publisher-token": "LIVEROOM_PUBLISHER_TOKEN",
    "--node-id": "LIVEROOM_NODE_ID",
    "--secret": "LIVEROOM_SECRET",
    "--log-level": "LIVEROOM_LOG_LEVEL",
    "--online-ttl": "LIVEROOM_ONLINE_TTL",
    "--vip-room": "LIVEROOM_VIP_ROOMS",
    "--vip-shards": "LIVEROOM_VIP_SHARDS",
    "--viewers-threshold": "LIVEROOM_VIEWERS_THRESHOLD",
}


@pytest.fixture(autouse=True)
def _no_liveroom_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LIVEROOM_"):
            monkeypatch.delenv(name)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIVEROOM_")}
    env.update(extra)
    return env


def flat(text: str) -> str:
    """Help text with its line wrapping undone."""
    return " ".join(text.split())


def test_help_lists_serve() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^\s+serve\b", result.output, re.MULTILINE), result.output


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert __version__ in result.output


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_serve_help_mentions_every_option_and_env_var(flag: str) -> None:
    result = CliRunner().invoke(main, ["serve", flag])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    for option, env in OPTIONS.items():
        assert option in text, option
        assert f"env var: {env}" in text, env


@pytest.mark.parametrize(("args", "env"), [
    pytest.param(["serve", "--store", "bogus://x"], {}, id="flag"),
    pytest.param(["serve"], {"LIVEROOM_STORE": "bogus://x"}, id="env"),
])
def test_unknown_store_is_refused(args: list[str], env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code != 0
    assert "bogus://x" in result.output, result.output
    assert "store" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [
    ["serve", "--port", "70000"],
    ["serve", "--port", "http"],
    ["serve", "--log-level", "loud"],
])
def test_bad_options_are_refused(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.output


@pytest.mark.parametrize(("args", "env"), [
    pytest.param(["serve", "--online-ttl", "60"], {}, id="flag"),
    pytest.param(["serve"], {"LIVEROOM_ONLINE_TTL": "70"}, id="env"),
])
def test_an_online_ttl_shorter_than_a_held_poll_is_refused(args: list[str],
                                                           env: dict[str, str]) -> None:
    # A listener holding a 60 s poll (plus the hold interval) must not flicker offline.
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, result.output
    assert "online_ttl" in result.output
    assert "must exceed the longest poll timeout plus the longest hold interval (70 s)" \
        in flat(result.output)


def test_a_bad_vip_room_name_is_refused() -> None:
    result = CliRunner().invoke(main, ["serve", "--vip-room", "no spaces"])
    assert result.exit_code == 2, result.output
    assert "--vip-room" in result.output


def test_python_m_liveroom_help() -> None:
    done = subprocess.run([sys.executable, "-m", "liveroom", "--help"], env=clean_env(),
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout


def test_python_m_liveroom_unknown_store() -> None:
    done = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--store", "bogus://x"],
                          env=clean_env(), capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "bogus://x" in done.stderr
    assert "Traceback" not in done.stderr


# -- the real process ----------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def read_announcement(proc: asyncio.subprocess.Process, within: float) -> list[str]:
    """stdout lines up to the end of the announcement ("stop with Ctrl-C")."""
    assert proc.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(within):
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                raise AssertionError(f"the server exited before announcing: {lines}")
            line = raw.decode().rstrip()
            lines.append(line)
            if "stop with Ctrl-C" in line:
                return lines


@pytest.mark.parametrize(("how", "sig"), [
    pytest.param("flag", signal.SIGINT, id="port-flag-SIGINT"),
    pytest.param("env", signal.SIGTERM, id="port-env-SIGTERM"),
])
async def test_serve_end_to_end(tmp_path: Path, how: str, sig: signal.Signals) -> None:
    port = free_port()
    args = [sys.executable, "-m", "liveroom", "serve"]
    if how == "flag":
        args += ["--port", str(port)]
        env = clean_env()
    else:
        env = clean_env(LIVEROOM_PORT=str(port))
    env.pop("PYTHONUNBUFFERED", None)  # the announcement must flush itself
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env)
    try:
        try:
            lines = await read_announcement(proc, within=15)
        except TimeoutError:
            raise AssertionError(stderr_path.read_text()) from None
        text = "\n".join(lines)
        assert re.search(rf"listening on http://127\.0\.0\.1:{port}\b", text), text
        assert "store: memory" in text
        admin = re.search(r"admin token \(generated\): (\S+)", text)
        publisher = re.search(r"publisher token \(generated\): (\S+)", text)
        assert admin, text
        assert publisher, text
        assert admin.group(1) != publisher.group(1)

        base = f"http://127.0.0.1:{port}"
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            # Listening once announced: no retry needed.
            async with http.get(f"{base}/v1/rooms/r/poll", params={"uid": "u"}) as resp:
                assert resp.status == 200, await resp.text()
                first: dict[str, Any] = await resp.json()
            assert first["seq"] == 0
            assert first["reset"] is False

            # The printed tokens are the node's.
            for token in (publisher.group(1), admin.group(1)):
                async with http.post(f"{base}/v1/rooms/r/messages",
                                     json={"uid": "p", "body": "hi", "important": True},
                                     headers={"Authorization": f"Bearer {token}"}) as resp:
                    assert resp.status == 201, await resp.text()
            async with http.post(f"{base}/v1/rooms/r/messages",
                                 json={"uid": "p", "body": "hi", "important": True},
                                 headers={"Authorization": "Bearer nope"}) as resp:
                assert resp.status == 401

            # A held poll is answered, empty with its cursors, on shutdown.
            async with http.get(f"{base}/v1/rooms/r/poll", params={"uid": "u"}) as resp:
                head: dict[str, Any] = await resp.json()
            params = {"uid": "u", "epoch": head["epoch"], "seq": str(head["seq"]),
                      "iseq": str(head["iseq"]), "ctx": head["ctx"], "timeout": "30"}

            async def held_poll() -> tuple[int, Any]:
                async with http.get(f"{base}/v1/rooms/r/poll", params=params) as r:
                    return r.status, await r.json()

            held = asyncio.create_task(held_poll())
            await asyncio.sleep(0.5)
            assert not held.done()
            proc.send_signal(sig)
            async with asyncio.timeout(10):
                status, doc = await held
                code = await proc.wait()
        assert status == 200
        assert (doc["epoch"], doc["seq"], doc["iseq"]) == (
            head["epoch"], head["seq"], head["iseq"])
        assert doc["messages"] == []
        assert doc["important"] == []
        assert code == 0, stderr_path.read_text()
        assert "Traceback" not in stderr_path.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
