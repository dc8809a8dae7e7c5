"""The ``liveroom`` command: its help, its refusals, and the real process
serving, announcing its tokens and stopping cleanly on a signal."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner, Result
from conftest import RedisServer
from support import ADMIN, PUBLISHER, Listener, clean_env, liveroom_process, running_node, send

from liveroom import __version__
from liveroom.cli import (
    MODERATION_SECONDS_MAX,
    TICKET_ENV,
    UID_ENV,
    URL_ENV,
    duration_text,
    main,
    seconds_of,
)
from liveroom.cli.listen import _message_line, _personal_line
from liveroom.cli.moderation import _action_text
from liveroom.client import AuditEntry, Message, PersonalMessage
from liveroom.clock import FakeClock
from liveroom.settings import Settings, declared, env_of, parse_windows, settings_from, take_former
from liveroom.store.base import SANCTION_SECONDS_MAX
from proxy.tickets import mint

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
    "--vip-shards": "LIVEROOM_VIP_SHARDS",
    "--viewers-threshold": "LIVEROOM_VIEWERS_THRESHOLD",
    "--tiers": "LIVEROOM_TIERS",
    "--hold-tick": "LIVEROOM_HOLD_TICK",
    "--rate-limits": "LIVEROOM_RATE_LIMITS",
    "--room-rate-limit": "LIVEROOM_ROOM_RATE_LIMIT",
    "--vip-refresh": "LIVEROOM_VIP_REFRESH",
    "--keepalive-timeout": "LIVEROOM_KEEPALIVE_TIMEOUT",
    "--header-timeout": "LIVEROOM_HEADER_TIMEOUT",
    "--request-timeout": "LIVEROOM_REQUEST_TIMEOUT",
    "--workers": "LIVEROOM_WORKERS",
    "--auth": "LIVEROOM_AUTH",
    "--ticket-key": "LIVEROOM_TICKET_KEYS",
    "--metrics-token": "LIVEROOM_METRICS_TOKEN",
}


pytestmark = pytest.mark.usefixtures("no_liveroom_env")


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


@pytest.mark.parametrize(("args", "said"), [
    (["serve", "--port", "70000"], "--port: port must be between 0 and 65535, not 70000"),
    (["serve", "--port", "http"], "--port: 'http' is not a whole number"),
    (["serve", "--log-level", "loud"], "--log-level: log_level must be one of debug, info"),
    (["serve", "--send-buffer", "4096"],
     "--send-buffer: send_buffer must be 0 (off) or at least 16384 bytes, not 4096"),
    (["serve", "--send-buffer", "64k"],
     "--send-buffer: '64k' is neither a number of bytes nor 'off'"),
])
def test_bad_options_are_refused(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert said in result.output


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


def test_serve_help_shows_the_traffic_defaults() -> None:
    text = flat(CliRunner().invoke(main, ["serve", "--help"]).output)
    assert "default: 1000:1,10000:2,100000:5,1000000:8+2" in text
    assert "default: 5/s,30/m,300/h" in text


@pytest.mark.parametrize(("args", "env", "mentions"), [
    pytest.param(["serve", "--tiers", "1000"], {}, ["--tiers", "bad tier '1000'"],
                 id="tier-without-interval"),
    pytest.param(["serve"], {"LIVEROOM_TIERS": "x:1"}, ["--tiers", "bad tier 'x:1'"],
                 id="tier-env"),
    pytest.param(["serve", "--tiers", "1000:9+2"], {}, ["--tiers", "exceeds hold_interval_max"],
                 id="tier-too-long"),
    pytest.param(["serve", "--rate-limits", "5/w"], {}, ["--rate-limits", "bad rate window"],
                 id="rate-unit"),
    pytest.param(["serve"], {"LIVEROOM_RATE_LIMITS": "0/s"}, ["--rate-limits", "positive"],
                 id="rate-env"),
    pytest.param(["serve", "--room-rate-limit", "-1"], {}, ["--room-rate-limit"],
                 id="room-rate"),
    pytest.param(["serve", "--hold-tick", "2"], {}, ["--hold-tick"], id="hold-tick"),
    pytest.param(["serve", "--vip-refresh", "0"], {}, ["--vip-refresh"], id="vip-refresh"),
    pytest.param(["serve", "--vip-room", "stage"], {}, ["No such option"], id="vip-room-gone"),
    pytest.param(["serve", "--trusted-proxies", "10.0.0.0/33"], {},
                 ["--trusted-proxies", "'10.0.0.0/33' is neither an address nor a network"],
                 id="trusted-proxy"),
])
def test_bad_traffic_settings_are_refused(args: list[str], env: dict[str, str],
                                          mentions: list[str]) -> None:
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, result.output
    for text in mentions:
        assert text in flat(result.output), result.output
    assert "Traceback" not in result.output


def test_trusted_proxies_are_the_nodes_own_machine_unless_told() -> None:
    """A repeatable flag not given (click passes ``()``) keeps its default."""
    assert settings_from({"trusted_proxies": ()})[0] == Settings()
    assert Settings().trusted_proxies == ("127.0.0.0/8", "::1")
    told, _ = settings_from({"trusted_proxies": "10.0.0.0/24, 192.0.2.1"})
    assert told is not None
    assert told.trusted_proxies == ("10.0.0.0/24", "192.0.2.1")
    nobody, _ = settings_from({"trusted_proxies": ("none",)})
    assert nobody is not None
    assert nobody.trusted_proxies == ()


@pytest.mark.parametrize("args", [
    ["vip", "--help"], ["vip", "add", "--help"], ["vip", "remove", "--help"],
    ["vip", "list", "--help"], ["vip", "pin", "--help"], ["vip", "unpin", "--help"],
    ["room", "end", "--help"], ["room", "start", "--help"],
])
def test_operators_commands_explain_themselves(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    if args[-2] in ("vip", "room"):
        assert "add" in text or "end" in text
    else:
        for option, env in [("--url", "LIVEROOM_URL"),
                            ("--admin-token", "LIVEROOM_ADMIN_TOKEN")]:
            assert option in text
            assert f"env var: {env}" in text
        assert "--store" in text
        assert "default: http://127.0.0.1:8080" in text


def test_main_help_lists_the_operators_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    for command in ("vip", "room"):
        assert re.search(rf"^\s+{command}\b", result.output, re.MULTILINE), result.output


def test_the_clients_environment_variables_name_no_setting() -> None:
    """LIVEROOM_URL, LIVEROOM_TICKET and LIVEROOM_UID are the clients' own: no
    setting of the server has one of them (one name, one meaning)."""
    assert (URL_ENV, TICKET_ENV, UID_ENV) == ("LIVEROOM_URL", "LIVEROOM_TICKET", "LIVEROOM_UID")
    assert not {URL_ENV, TICKET_ENV, UID_ENV} & {env_of(name) for name, _, _ in declared()}


@pytest.mark.parametrize("args", [
    ["vip", "add", "no spaces"], ["vip", "remove", "x" * 65], ["room", "end", "a/b"],
])
def test_a_bad_room_name_is_refused_before_any_call(args: list[str]) -> None:
    result = CliRunner().invoke(main, [*args, "--url", "http://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert "room must match" in result.output


@pytest.mark.parametrize("store", ["memory", "memory://"])
def test_the_memory_store_cannot_be_changed_from_outside(store: str) -> None:
    result = CliRunner().invoke(main, ["vip", "add", "stage", "--store", store])
    assert result.exit_code == 2, result.output
    assert "lives inside the server" in flat(result.output)
    assert "--url" in result.output


def test_an_unknown_store_is_refused_by_the_operators_commands() -> None:
    result = CliRunner().invoke(main, ["vip", "list", "--store", "bogus://x"])
    assert result.exit_code == 2, result.output
    assert "bogus://x" in result.output


def test_a_server_nobody_runs_is_a_clear_failure() -> None:
    port = free_port()
    result = CliRunner().invoke(main, ["vip", "list", "--url", f"http://127.0.0.1:{port}"],
                                env={"LIVEROOM_ADMIN_TOKEN": "t"})
    assert result.exit_code == 1, result.output
    assert f"cannot reach http://127.0.0.1:{port}: Connection refused" in result.output
    assert "ssl:default" not in result.output  # aiohttp's words for plain http
    assert "Traceback" not in result.output


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
        admin = re.search(r"^    export LIVEROOM_ADMIN_TOKEN=(\S+)$", text, re.M)
        publisher = re.search(r"^    export LIVEROOM_PUBLISHER_TOKEN=(\S+)$", text, re.M)
        assert f"    export LIVEROOM_URL=http://127.0.0.1:{port}" in text
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


# -- the operators' commands against a running node, and against the store ------

async def liveroom(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the command in a thread, so the node in this event loop can answer it."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)


async def test_operators_commands_through_a_running_node(session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_ADMIN_TOKEN": ADMIN}
        result = await liveroom("vip", "add", "stage", env=env)
        assert (result.exit_code, result.output) == (0, "room stage is now vip\n")
        assert node.node.vip_list.is_vip("stage")
        async with session.get(f"{node.url}/v1/rooms/stage/stats") as resp:
            assert (await resp.json())["vip"] is True
        result = await liveroom("vip", "add", "stage", env=env)
        assert result.output == "room stage was already vip\n"
        await liveroom("vip", "add", "arena", "--url", node.url, "--admin-token", ADMIN)
        result = await liveroom("vip", "pin", "quiet", "normal", env=env)
        assert result.output == "room quiet is pinned to the normal sect (it was there " \
                                "already)\n"
        result = await liveroom("vip", "list", env=env)
        assert result.exit_code == 0
        assert re.fullmatch(r"arena  vip     pinned  since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n"
                            r"quiet  normal  pinned  since -\n"
                            r"stage  vip     pinned  since [-\d]+ [:\d]+ UTC\n",
                            result.stdout), result.stdout
        result = await liveroom("vip", "unpin", "arena", env=env)
        assert result.output == "room arena is unpinned (in the vip sect; the automatic " \
                                "rule decides)\n"
        assert node.node.vip_list.is_vip("arena")
        await liveroom("vip", "unpin", "quiet", env=env)
        result = await liveroom("vip", "remove", "stage", env=env)
        assert result.output == "room stage is no longer vip\n"
        result = await liveroom("vip", "remove", "stage", env=env)
        assert result.output == "room stage was not vip\n"
        await liveroom("vip", "remove", "arena", env=env)
        result = await liveroom("vip", "list", env=env)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "no vip rooms\n")

        first = await Listener(session, "show").poll(node.url)
        result = await liveroom("room", "end", "show", env=env)
        assert result.exit_code == 0, result.output
        found = re.fullmatch(r"room show: broadcast 1 ended, broadcast 2 started "
                             r"\(epoch (\S+)\)\n", result.output)
        assert found, result.output
        assert found.group(1) != first["epoch"]

        result = await liveroom("room", "start", "soon", env=env)
        assert result.exit_code == 0, result.output
        found = re.fullmatch(r"room soon opened: broadcast 1 \(epoch (\S+)\)\n", result.output)
        assert found, result.output
        answer = await Listener(session, "soon").poll(node.url)
        assert answer["epoch"] == found.group(1)
        result = await liveroom("room", "start", "soon", env=env)
        assert result.output == (
            f"room soon was open already: broadcast 1 (epoch {found.group(1)})\n")


@pytest.mark.parametrize(("token", "message"), [
    (None, "send Authorization: Bearer <token> (give --admin-token or set "
           "LIVEROOM_ADMIN_TOKEN) (HTTP 401)"),
    ("nope", "unknown token (HTTP 401)"),
    (PUBLISHER, "the publisher token cannot do this (HTTP 403)"),
])
async def test_a_refused_command_exits_1_with_the_servers_message(
        token: str | None, message: str) -> None:
    async with running_node() as node:
        args = ["vip", "add", "stage", "--url", node.url]
        if token is not None:
            args += ["--admin-token", token]
        result = await liveroom(*args)
        assert result.exit_code == 1, result.output
        assert result.output == f"Error: {message}\n"
        assert not node.node.vip_list.is_vip("stage")


async def test_operators_commands_on_the_store_reach_every_node(redis_url: str) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock) as node:
        result = await liveroom("vip", "add", "stage", "--store", redis_url)
        assert (result.exit_code, result.output) == (0, "room stage is now vip\n")
        # The node reads the whitelist within its refresh period.
        async with asyncio.timeout(10):
            while not node.node.vip_list.is_vip("stage"):
                await clock.advance(0.5)
                await asyncio.sleep(0.01)
        result = await liveroom("vip", "list", "--store", redis_url)
        assert result.stdout.startswith("stage  vip     pinned  since ")
        result = await liveroom("vip", "remove", "stage", "--store", redis_url)
        assert result.output == "room stage is no longer vip\n"
        result = await liveroom("room", "end", "show", "--store", redis_url)
        assert result.exit_code == 0, result.output
        assert result.output.startswith("room show: broadcast 1 ended, broadcast 2 started")
        result = await liveroom("room", "start", "show", "--store", redis_url)
        assert result.output.startswith("room show was open already: broadcast 2 ")


async def test_a_store_that_is_down_is_a_clear_failure(redis_server: RedisServer,
                                                       redis_url: str) -> None:
    redis_server.stop()
    try:
        result = await liveroom("vip", "list", "--store", redis_url)
    finally:
        redis_server.start()
    assert result.exit_code == 1, result.output
    assert "Error:" in result.output
    assert "Traceback" not in result.output


async def test_the_real_command_against_a_node() -> None:
    async with running_node() as node:
        for args, out in [(["vip", "add", "stage"], "room stage is now vip\n"),
                          (["vip", "list"], "stage  vip     pinned  since ")]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "liveroom", *args, "--url", node.url,
                env=clean_env(LIVEROOM_ADMIN_TOKEN=ADMIN),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, stderr
            assert stdout.decode().startswith(out)


# -- whose credential a command uses: flags first, then the environment ------------

KEY = "ticket-key-of-the-cli-tests-0123456789"
"""The ticket key of the ticket-mode nodes below (32 bytes or more)."""


async def messages_of(session: aiohttp.ClientSession, url: str, room: str,
                      ticket: str) -> list[tuple[str, Any, bool]]:
    """``room``'s messages since its first as (uid, body, important), read
    with ``ticket`` (the first poll finds the epoch, the second reads from seq 0)."""
    params = {"ticket": ticket, "timeout": "1"}
    async with session.get(f"{url}/v1/rooms/{room}/poll", params=params) as resp:
        assert resp.status == 200, await resp.text()
        epoch = (await resp.json())["epoch"]
    async with session.get(f"{url}/v1/rooms/{room}/poll", params={
            **params, "epoch": epoch, "seq": "0", "iseq": "0"}) as resp:
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
    return [(m["uid"], m["body"], m["important"])
            for m in answer["important"] + answer["messages"]]


@pytest.mark.parametrize("env", [
    pytest.param({"LIVEROOM_PUBLISHER_TOKEN": PUBLISHER}, id="publisher-token"),
    pytest.param({"LIVEROOM_PUBLISHER_TOKEN": PUBLISHER, "LIVEROOM_ADMIN_TOKEN": ADMIN},
                 id="both-tokens"),
    pytest.param({"LIVEROOM_UID": "mallory"}, id="uid"),
    pytest.param({"LIVEROOM_PUBLISHER_TOKEN": PUBLISHER, "LIVEROOM_UID": "mallory",
                  "LIVEROOM_TICKET": "not-this-one"}, id="everything"),
])
async def test_a_ticket_flag_wins_over_the_environment(session: aiohttp.ClientSession,
                                                       env: dict[str, str]) -> None:
    """The shell the production recipe sets up exports the tokens: a ticket
    given on the command line still speaks, for the uid it names."""
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        ticket = mint(KEY, "alice", rooms=["hall"])
        result = await liveroom("send", "hall", "hi", "--ticket", ticket,
                                env={"LIVEROOM_URL": node.url, **env})
        assert (result.exit_code, result.stdout) == (0, "1\n"), result.output
        assert await messages_of(session, node.url, "hall", ticket) == [
            ("alice", "hi", False)]


async def test_a_token_flag_wins_over_a_ticket_in_the_environment(
        session: aiohttp.ClientSession) -> None:
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        ticket = mint(KEY, "alice", rooms=["hall"])
        result = await liveroom("send", "hall", "on air", "--important", "--uid", "host",
                                "--token", PUBLISHER,
                                env={"LIVEROOM_URL": node.url, "LIVEROOM_TICKET": ticket})
        assert (result.exit_code, result.stdout) == (0, "1\n"), result.output
        assert await messages_of(session, node.url, "hall", ticket) == [
            ("host", "on air", True)]


async def test_a_ticket_flag_that_cannot_publish_says_the_token_was_left_aside() -> None:
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        ticket = mint(KEY, "alice", rooms=["hall"])
        result = await liveroom("send", "hall", "hi", "--important", "--ticket", ticket,
                                env={"LIVEROOM_URL": node.url,
                                     "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER})
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert flat(result.stderr) == (
            "-- LIVEROOM_PUBLISHER_TOKEN from the environment is not used: the --ticket "
            "given speaks (a flag wins over the environment) Error: this ticket cannot "
            "send important messages (it has no publish right) (HTTP 403)")


async def test_a_like_with_a_ticket_flag_taps_as_the_tickets_uid(
        session: aiohttp.ClientSession) -> None:
    """``like --ticket T`` in a shell that exports another LIVEROOM_UID: the
    ticket names who taps (the environment's uid beside it was refused, 401)."""
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        await send(session, node.url, "hall", "welcome", important=True)  # the room exists
        ticket = mint(KEY, "alice", rooms=["hall"])
        result = await liveroom("like", "hall", "--count", "3", "--ticket", ticket,
                                env={"LIVEROOM_URL": node.url, "LIVEROOM_UID": "mallory"})
        assert (result.exit_code, result.stdout) == (0, "hall: 3 likes\n"), result.output


async def test_a_like_without_a_ticket_on_a_ticket_server_says_what_to_give(
        session: aiohttp.ClientSession) -> None:
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        await send(session, node.url, "hall", "welcome", important=True)  # the room exists
        result = await liveroom("like", "hall", env={"LIVEROOM_URL": node.url})
        assert result.exit_code == 1, result.output
        assert "(give --ticket or set LIVEROOM_TICKET) (HTTP 401)" in flat(result.output)


async def test_a_send_with_a_ticket_and_a_token_and_no_uid_goes_as_the_tickets_uid(
        session: aiohttp.ClientSession) -> None:
    """Both exported, as the production recipe's shell may: the token speaks
    for a --uid; with none, the ticket names who sends (it was a 400, "uid is
    required", the token speaking for nobody)."""
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        ticket = mint(KEY, "alice", rooms=["hall"])
        result = await liveroom("send", "hall", "hi",
                                env={"LIVEROOM_URL": node.url, "LIVEROOM_TICKET": ticket,
                                     "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER})
        assert (result.exit_code, result.stdout) == (0, "1\n"), result.output
        assert await messages_of(session, node.url, "hall", ticket) == [
            ("alice", "hi", False)]


async def test_a_gift_with_a_ticket_flag_leaves_the_environments_token_aside(
        session: aiohttp.ClientSession) -> None:
    """``gift --ticket T`` in a shell that exports the publisher token: the
    ticket speaks (one without --publish gives no gift), not the token."""
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        await send(session, node.url, "hall", "welcome", important=True)  # the room exists
        ticket = mint(KEY, "alice", rooms=["hall"])
        result = await liveroom("gift", "hall", "--uid", "alice", "--value", "5",
                                "--ticket", ticket,
                                env={"LIVEROOM_URL": node.url,
                                     "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER})
        assert result.exit_code == 1, result.output
        assert flat(result.stderr).startswith(
            "-- LIVEROOM_PUBLISHER_TOKEN from the environment is not used: the --ticket "
            "given speaks (a flag wins over the environment) Error: "), result.stderr
        assert "(HTTP 403)" in result.stderr


async def test_a_listener_with_a_ticket_flag_is_the_tickets_uid(
        session: aiohttp.ClientSession) -> None:
    """``listen --ticket T`` in a shell that exports another LIVEROOM_UID."""
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        ticket = mint(KEY, "alice", rooms=["hall"])
        async with session.post(f"{node.url}/v1/rooms/hall/messages",
                                json={"uid": "host", "body": "welcome"},
                                headers={"Authorization": f"Bearer {PUBLISHER}"}) as resp:
            assert resp.status == 201, await resp.text()  # the room is open: members count
        async with liveroom_process(
                "listen", "hall", "--ticket", ticket,
                env=clean_env(LIVEROOM_URL=node.url, LIVEROOM_UID="mallory")) as proc:
            assert proc.stderr is not None
            async with asyncio.timeout(15):
                note = (await proc.stderr.readline()).decode()
            assert note.startswith("-- listening to hall (epoch "), note
            members: list[str] = []
            async with asyncio.timeout(10):  # a new listener shows within 5 s
                while not members:
                    await asyncio.sleep(0.1)
                    async with session.get(f"{node.url}/v1/rooms/hall/online",
                                           headers={"Authorization": f"Bearer {ADMIN}"}
                                           ) as resp:
                        assert resp.status == 200, await resp.text()
                        members = (await resp.json())["members"]
            assert members == ["alice"]
            proc.send_signal(signal.SIGINT)
            async with asyncio.timeout(5):
                assert await proc.wait() == 0


async def test_a_personal_send_says_its_pseq_is_not_a_seq() -> None:
    """``send --to`` prints a pseq: a position among the room's personal
    messages, numbered apart from its seqs, so it says so."""
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER}
        for text in ("one", "two"):
            result = await liveroom("send", "hall", text, "--uid", "host", env=env)
            assert result.stdout == f"{1 if text == 'one' else 2}\n", result.output
        result = await liveroom("send", "hall", "thanks", "--uid", "host", "--to", "alice",
                                env=env)
        assert (result.exit_code, result.stderr) == (0, ""), result.output
        assert result.stdout == (
            "personal message to alice: pseq 1, its position among hall's personal "
            "messages (numbered apart from the room's seq)\n")


async def test_like_gift_and_leaderboard_through_a_running_node() -> None:
    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url}
        result = await liveroom("like", "stage", "--count", "7", "--uid", "fan", env=env)
        assert result.exit_code == 1  # no such room yet
        assert "no such room: stage" in result.output
        async with aiohttp.ClientSession() as session:
            await send(session, node.url, "stage", "the show starts")
        result = await liveroom("like", "stage", "--count", "7", "--uid", "fan", env=env)
        assert (result.exit_code, result.output) == (0, "stage: 7 likes\n")
        result = await liveroom("like", "stage", "--count", "101", "--uid", "fan", env=env)
        assert result.exit_code == 2  # refused by the command, before the server
        result = await liveroom("gift", "stage", "--uid", "ann", "--value", "30", env=env)
        assert result.exit_code == 1
        assert "give --token or set LIVEROOM_PUBLISHER_TOKEN" in result.output
        for uid, value in [("ann", 30), ("bob", 50), ("ann", 25)]:
            result = await liveroom("gift", "stage", "--uid", uid, "--value", str(value),
                                    "--gift", "rose", "--token", PUBLISHER, env=env)
            assert result.exit_code == 0, result.output
        assert result.output == "stage: ann is number 1 with 55 (the room's gifts: 105)\n"
        result = await liveroom("leaderboard", "stage", env=env)
        assert (result.exit_code, result.output) == (
            0, "  1. ann  55\n  2. bob  50\nstage: 3 gifts, 105 in all\n")



async def test_listen_prints_the_top_givers_when_they_change(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()  # the node reads the rankings when the test says
    async with running_node(clock=clock) as node:
        ranking = node.node.proxy.ranking

        async def post(path: str, doc: dict[str, Any] | None, token: str) -> None:
            async with session.post(f"{node.url}{path}", json=doc,
                                    headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status in (200, 201), await resp.text()

        async def gift(uid: str, value: int) -> None:
            await post("/v1/rooms/stage/gifts", {"uid": uid, "value": value, "gift": "rose"},
                       PUBLISHER)

        # The room exists (a room nobody opened counts no poll, nor its gifts).
        await post("/v1/rooms/stage/messages", {"uid": "host", "body": "on air"}, PUBLISHER)
        async with liveroom_process("listen", "stage", "--uid", "ann", "--timeout", "1",
                                    env=clean_env(LIVEROOM_URL=node.url)) as proc:
            assert proc.stderr is not None
            notes = proc.stderr

            async def note() -> str:
                async with asyncio.timeout(15):
                    return (await notes.readline()).decode().rstrip("\n")

            assert (await note()).startswith("-- listening to stage (epoch ")
            for uid, value in [("ann", 30), ("bob", 50), ("cat", 5), ("dan", 1), ("ann", 25)]:
                await gift(uid, value)
            await ranking.refresh()
            assert await note() == "-- ranking: ann 55, bob 50, cat 5"
            await gift("dan", 99)
            await ranking.refresh()
            assert await note() == "-- ranking: dan 100, ann 55, bob 50"
            await post("/v1/admin/rooms/stage/end", None, ADMIN)
            await ranking.refresh()
            lines = [await note()]
            while not lines[-1].startswith("-- ranking"):  # the reset may come first
                lines.append(await note())
            assert lines[-1] == "-- ranking: no gifts (the broadcast ended)"
            assert lines[0].startswith("-- reset: "), lines
            proc.send_signal(signal.SIGINT)
            async with asyncio.timeout(5):
                assert await proc.wait() == 0


# -- moderation: recall, mute, ban, slow mode and the audit (issue 36) -------------

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86_400), ("1h30m", 5400),
    (" 10M ", 600), ("1d2h3m4s", 93_784), ("x", None), ("", None), ("10x", None),
    ("m", None), ("30m1h", None), ("1.5h", None), ("-5", None), ("٣", None),
])
def test_durations_read_as_seconds(text: str, seconds: int | None) -> None:
    assert seconds_of(text) == seconds
    if seconds is not None and text.strip() == text and text.islower():
        assert seconds_of(duration_text(seconds)) == seconds


def test_durations_are_written_as_they_are_read() -> None:
    assert [duration_text(s) for s in (0, 59, 60, 90, 3600, 5400, 86_400, 2_592_000)] == [
        "0s", "59s", "1m", "1m30s", "1h", "1h30m", "1d", "30d"]
    assert MODERATION_SECONDS_MAX == SANCTION_SECONDS_MAX  # the store's limit


@pytest.mark.parametrize(("args", "said"), [
    (["recall", "--help"], "its body is gone for good, and every listener is told"),
    (["mute", "--help"], "its sends are refused (HTTP 403 muted"),
    (["unmute", "--help"], "Lift UID's mute in ROOM"),
    (["ban", "--help"], "its polls and sends are refused (HTTP 403 banned)"),
    (["unban", "--help"], "Lift UID's ban from ROOM"),
    (["slow", "--help"], "each uid may send one normal message per SECONDS (0 lifts it"),
    (["moderation", "--help"], "newest first"),
])
def test_the_moderation_commands_explain_themselves(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert said in text
    for option, env in [("--url", "LIVEROOM_URL"), ("--admin-token", "LIVEROOM_ADMIN_TOKEN")]:
        assert option in text
        assert f"env var: {env}" in text
    assert ("--store" in text) is (args[0] != "recall")  # a recall goes through a server
    if args[0] in ("mute", "ban"):
        assert "--for DURATION How long: 30s, 10m, 2h, 1d, 1h30m, or plain seconds" in text
        assert "--reason" in text
    result = CliRunner().invoke(main, ["--help"])
    assert re.search(rf"^\s+{args[0]}\b", result.output, re.MULTILINE), result.output


@pytest.mark.parametrize(("args", "said"), [
    (["mute", "stage", "troll", "--for", "10x"],
     "Invalid value for '--for': '10x' is not a duration: give seconds (90) or numbers "
     "with a unit, s, m, h or d (30s, 10m, 2h, 1d, 1h30m)"),
    (["mute", "stage", "troll", "--for", "31d"],
     "Invalid value for '--for': '31d' is out of range: from 1s to 30d"),
    (["mute", "stage", "troll", "--for", "0"], "'0' is out of range: from 1s to 30d"),
    (["mute", "stage", "troll"], "Missing option '--for'"),
    (["ban", "stage", "troll", "--for", "soon"], "'soon' is not a duration"),
    (["slow", "stage", "five"], "Invalid value for 'SECONDS': 'five' is not a duration"),
    (["mute", "stage", "no spaces", "--for", "1m"], "uid must match"),
    (["recall", "stage", "0"], "0 is not in the range x>=1"),
    (["recall", "stage", "3"], "who recalls? Give --admin-token (or set LIVEROOM_ADMIN_TOKEN) "
                               "to recall any message, --uid UID to recall UID's own (open "
                               "mode), or --ticket"),
    (["recall", "stage", "3", "--uid", "fan", "--admin-token", "t"],
     "--uid recalls as that sender, --admin-token as a moderator: give one of them"),
    (["recall", "stage", "3", "--uid", "fan", "--personal"],
     "a personal message is the backend's: --uid cannot recall one"),
])
def test_bad_moderation_input_is_refused_before_any_call(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, [*args, "--url", "http://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert said in flat(result.output)


async def test_moderation_commands_through_a_running_node(
        session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_ADMIN_TOKEN": ADMIN}

        async def post(uid: str, body: str) -> int:
            async with session.post(f"{node.url}/v1/rooms/stage/messages",
                                    json={"uid": uid, "body": body}) as resp:
                return resp.status

        assert [await post(uid, body) for uid, body in [
            ("troll", "rude words"), ("fan", "oops"), ("fan", "hi")]] == [201, 201, 201]
        result = await liveroom("recall", "stage", "1", env=env)
        assert (result.exit_code, result.output) == (
            0, "room stage: message 1 of troll recalled (every listener is told)\n")
        answer = await Listener(session, "stage").poll(node.url)
        assert [(m["seq"], m["body"], m.get("recalled")) for m in answer["messages"]] == [
            (1, None, True), (2, "oops", None), (3, "hi", None)]
        # A sender's own, in open mode: the admin token of the environment is not used.
        result = await liveroom("recall", "stage", "2", "--uid", "troll", env=env)
        assert result.exit_code == 1, result.output
        assert result.output.startswith("Error: ")
        assert result.output.endswith("(HTTP 403)\n")
        # Nor a ticket a shell left in its environment: an open server takes none.
        result = await liveroom("recall", "stage", "2", "--uid", "fan",
                                env={**env, "LIVEROOM_TICKET": "left-over"})
        assert result.stdout == "room stage: message 2 of fan recalled (every listener " \
                                "is told)\n", result.output
        result = await liveroom("recall", "stage", "99", env=env)
        assert result.exit_code == 1
        assert result.output.endswith("(HTTP 404)\n")

        result = await liveroom("mute", "stage", "troll", "--for", "10m", "--reason", "spam",
                                env=env)
        assert result.exit_code == 0, result.output
        assert re.fullmatch(rf"troll is muted in room stage for 10m \(until {WHEN}\): spam\n",
                            result.output), result.output
        assert await post("troll", "again") == 403
        result = await liveroom("unmute", "stage", "troll", env=env)
        assert (result.exit_code, result.output) == (0, "troll's mute in room stage is "
                                                        "lifted\n")
        assert await post("troll", "sorry") == 201
        result = await liveroom("ban", "stage", "spammer", "--reason", "links", env=env)
        assert result.output == "spammer is banned from room stage until lifted: links\n"
        assert await post("spammer", "buy") == 403
        result = await liveroom("ban", "stage", "other", "--for", "1h", env=env)
        assert re.fullmatch(rf"other is banned from room stage for 1h \(until {WHEN}\)\n",
                            result.output), result.output
        result = await liveroom("unban", "stage", "spammer", env=env)
        assert result.output == "spammer's ban from room stage is lifted\n"
        assert await post("spammer", "sorry") == 201
        result = await liveroom("slow", "stage", "5", env=env)
        assert result.output == "room stage: slow mode, one message per 5 s per uid\n"
        assert await post("fan", "one") == 201
        assert await post("fan", "two") == 429

        result = await liveroom("moderation", "stage", env=env)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == "room stage: slow mode, one message per 5 s; 0 muted, 1 banned"
        # fan's recall of its own message is not moderation: not in the audit.
        assert [line.split("  ", 1)[1] for line in lines[1:]] == [
            "admin  slow mode, one message per 5 s", "admin  unban spammer",
            "admin  ban other for 1h", "admin  ban spammer until lifted: links",
            "admin  unmute troll", "admin  mute troll for 10m: spam",
            "admin  recall message 1"]
        assert all(re.match(WHEN, line) for line in lines[1:])
        result = await liveroom("moderation", "stage", "--limit", "1", env=env)
        assert len(result.output.splitlines()) == 2
        result = await liveroom("slow", "stage", "0", env=env)
        assert result.output == "room stage: slow mode off\n"
        result = await liveroom("moderation", "quiet", env=env)
        assert result.output == ("room quiet: slow mode off; 0 muted, 0 banned\n"
                                 "no moderation in this broadcast yet\n")


@pytest.mark.parametrize("args", [
    ["mute", "stage", "troll", "--for", "1m"], ["unmute", "stage", "troll"],
    ["ban", "stage", "troll"], ["unban", "stage", "troll"], ["slow", "stage", "5"],
    ["moderation", "stage"],
])
async def test_moderation_commands_need_the_admin_token(args: list[str]) -> None:
    async with running_node() as node:
        result = await liveroom(*args, "--url", node.url, "--admin-token", PUBLISHER)
        assert (result.exit_code, result.output) == (
            1, "Error: the publisher token cannot do this (HTTP 403)\n")
        result = await liveroom(*args, "--url", node.url)
        assert result.exit_code == 1
        assert "(give --admin-token or set LIVEROOM_ADMIN_TOKEN) (HTTP 401)" in result.output
        assert node.node.proxy.moderation.rules == {}


async def test_moderation_commands_on_the_store_reach_every_node(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url) as node:
        async def post(uid: str) -> int:
            async with session.post(f"{node.url}/v1/rooms/stage/messages",
                                    json={"uid": uid, "body": "hi"}) as resp:
                return resp.status

        assert await post("fan") == 201
        result = await liveroom("mute", "stage", "troll", "--for", "1m", "--reason", "spam",
                                "--store", redis_url)
        assert result.exit_code == 0, result.output
        assert re.fullmatch(rf"troll is muted in room stage for 1m \(until {WHEN}\): spam\n",
                            result.output), result.output
        async with asyncio.timeout(5):  # the node reads the store's journal every 250 ms
            while await post("troll") != 403:
                await asyncio.sleep(0.05)
        result = await liveroom("slow", "stage", "1h", "--store", redis_url)
        assert result.output == "room stage: slow mode, one message per 3600 s per uid\n"
        result = await liveroom("ban", "stage", "spammer", "--store", redis_url)
        assert result.output == "spammer is banned from room stage until lifted\n"
        result = await liveroom("unmute", "stage", "troll", "--store", redis_url)
        assert result.output == "troll's mute in room stage is lifted\n"
        result = await liveroom("moderation", "stage", "--store", redis_url)
        lines = result.output.splitlines()
        assert lines[0] == "room stage: slow mode, one message per 3600 s; 0 muted, 1 banned"
        assert [line.split("  ", 1)[1] for line in lines[1:]] == [
            "admin  unmute troll", "admin  ban spammer until lifted",
            "admin  slow mode, one message per 3600 s", "admin  mute troll for 1m: spam"]
        result = await liveroom("mute", "stage", "troll", "--for", "1m", "--reason", "x" * 201,
                                "--store", redis_url)
        assert result.exit_code == 1
        assert result.output == "Error: reason must be text of at most 200 characters\n"


async def test_listen_notes_recalls_and_slow_mode_and_shows_tombstones(
        session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_ADMIN_TOKEN": ADMIN}
        for uid, body in [("troll", "rude words"), ("fan", "hi")]:
            async with session.post(f"{node.url}/v1/rooms/stage/messages",
                                    json={"uid": uid, "body": body}) as resp:
                assert resp.status == 201, await resp.text()
        async with liveroom_process("listen", "stage", "--uid", "ann", "--timeout", "1",
                                    env=clean_env(LIVEROOM_URL=node.url)) as proc:
            assert proc.stdout is not None
            assert proc.stderr is not None
            notes, out = proc.stderr, proc.stdout

            async def line(stream: asyncio.StreamReader) -> str:
                async with asyncio.timeout(15):
                    return (await stream.readline()).decode().rstrip("\n")

            assert (await line(notes)).startswith("-- listening to stage (epoch ")
            assert [await line(out), await line(out)] == ["1 troll: rude words", "2 fan: hi"]
            async with session.post(f"{node.url}/v1/rooms/stage/messages",
                                    json={"uid": "system", "body": "you won", "to": "ann"},
                                    headers={"Authorization": f"Bearer {PUBLISHER}"}) as resp:
                assert resp.status == 201, await resp.text()
            assert await line(out) == "p1 [to ann] system: you won"
            assert (await liveroom("recall", "stage", "1", env=env)).exit_code == 0
            assert await line(notes) == "-- recalled: 1"
            result = await liveroom("recall", "stage", "1", "--personal", env=env)
            assert result.stdout == "room stage: personal message p1 of system to ann " \
                                    "recalled (ann is told)\n", result.output
            assert await line(notes) == "-- recalled: p1"
            assert (await liveroom("slow", "stage", "5", env=env)).exit_code == 0
            assert await line(notes) == "-- slow mode: one message per 5 s"
            assert (await liveroom("slow", "stage", "0", env=env)).exit_code == 0
            assert await line(notes) == "-- slow mode: off"
            # A quiet room's new likes total reaches the held poll: said too.
            assert (await liveroom("like", "stage", "--count", "12", "--uid", "bob",
                                   env=env)).exit_code == 0
            assert await line(notes) == "-- likes: 12"
            proc.send_signal(signal.SIGINT)
            async with asyncio.timeout(5):
                assert await proc.wait() == 0
        # A listener that comes later reads the message as recalled, without its body.
        for args, first in [((), "1 [recalled] troll"),
                            (("--json",), {"seq": 1, "uid": "troll", "important": False,
                                           "body": None, "recalled": True})]:
            async with liveroom_process("listen", "stage", *args,
                                        env=clean_env(LIVEROOM_URL=node.url)) as proc:
                assert proc.stdout is not None
                async with asyncio.timeout(15):
                    got = (await proc.stdout.readline()).decode().rstrip("\n")
                if args:
                    shown = json.loads(got)
                    del shown["ts"]
                    assert shown == first
                else:
                    assert got == first
                proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(5):
                    assert await proc.wait() == 0


async def test_recall_with_a_ticket_flag_over_the_environments_admin_token(
        session: aiohttp.ClientSession) -> None:
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_ADMIN_TOKEN": ADMIN}
        alice, bob = (mint(KEY, uid, rooms=["hall"]) for uid in ("alice", "bob"))
        for ticket in (alice, bob):
            result = await liveroom("send", "hall", "hi", "--ticket", ticket, env=env)
            assert result.exit_code == 0, result.output
        # Bob's ticket speaks, not the admin token: it cannot recall alice's message.
        result = await liveroom("recall", "hall", "1", "--ticket", bob, env=env)
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert flat(result.stderr).startswith(
            "-- LIVEROOM_ADMIN_TOKEN from the environment is not used: the --ticket given "
            "speaks (a flag wins over the environment) Error: ")
        assert result.stderr.endswith("(HTTP 403)\n")
        result = await liveroom("recall", "hall", "2", "--ticket", bob, env=env)
        assert result.stdout == "room hall: message 2 of bob recalled (every listener is " \
                                "told)\n", result.output
        result = await liveroom("recall", "hall", "1", env=env)  # the admin token: any
        assert result.stdout == "room hall: message 1 of alice recalled (every listener " \
                                "is told)\n", result.output
        async with session.get(f"{node.url}/v1/admin/rooms/hall/moderation",
                               headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
            audit = (await resp.json())["audit"]
        # bob's recall of his own message is not moderation: not in the audit.
        assert [(e["by"], e["target"]) for e in audit] == [("admin", "room:1")]


def test_a_recalled_message_is_shown_without_its_body() -> None:
    assert _message_line(Message(7, "troll", False, 0, None, recalled=True)) == \
        "7 [recalled] troll"
    assert _message_line(Message(8, "host", True, 0, None, recalled=True)) == \
        "8 [important] [recalled] host"
    assert _personal_line(PersonalMessage(3, 1, "system", "ann", 0, None, recalled=True)) \
        == "p3 [to ann] [recalled] system"
    assert _action_text(AuditEntry(0, "admin", "recall", "personal:3", 0, "")) == \
        "recall personal message p3"
    assert _action_text(AuditEntry(0, "admin", "approve", "bob:3", 0, "word: darn")) == \
        "approve held message 3 of bob (held for: word: darn)"
    assert _action_text(AuditEntry(0, "admin", "deny", "eve:12", 0, "")) == \
        "deny held message 12 of eve"


# -- the review queue (issue 47) ---------------------------------------------------------


def test_review_explains_itself() -> None:
    result = CliRunner().invoke(main, ["review", "--help"])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "List ROOM's messages held for review" in text
    for option, env in [("--url", "LIVEROOM_URL"), ("--admin-token", "LIVEROOM_ADMIN_TOKEN")]:
        assert option in text
        assert f"env var: {env}" in text
    assert "--approve ID" in text
    assert "--deny ID" in text
    assert "--store" not in text  # an approval is a send: through a server
    result = CliRunner().invoke(main, ["--help"])
    assert re.search(r"^\s+review\b", result.output, re.MULTILINE), result.output


@pytest.mark.parametrize(("args", "said"), [
    (["review", "stage", "--approve", "1", "--deny", "2"], "give --approve or --deny, not both"),
    (["review", "stage", "--approve", "x"], "'x': a held message's id is its number"),
    (["review", "stage", "--deny", "0"], "'0': a held message's id is its number"),
    (["review", "stage", "--limit", "0"], "0 is not in the range 1<=x<=1000"),
    (["review", "no room"], "room must match"),
])
def test_bad_review_input_is_refused_before_any_call(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, [*args, "--url", "http://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert said in flat(result.output)


async def test_review_through_a_running_node(session: aiohttp.ClientSession) -> None:
    from liveroom.model import NewMessage

    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_ADMIN_TOKEN": ADMIN}
        result = await liveroom("review", "stage", env=env)
        assert (result.exit_code, result.output) == (0, "room stage: 0 held for review\n")
        await send(session, node.url, "stage", "hello", uid="host")
        hold = node.node.review.hold
        await hold("stage", NewMessage("bob", "darn it", False, 1_790_000_000_000), "word: darn")
        await hold("stage", NewMessage("host", {"event": "x"}, True, 1_790_000_000_001), "")
        await hold("stage", NewMessage("sys", "psst", True, 1_790_000_000_002, to="al"), "hook")
        result = await liveroom("review", "stage", env=env)
        assert result.exit_code == 0, result.output
        assert result.output == (
            "room stage: 3 held for review\n"
            "   1  2026-09-21 14:13:20 UTC  bob (word: darn): darn it\n"
            '   2  2026-09-21 14:13:20 UTC  host [important]: {"event": "x"}\n'
            "   3  2026-09-21 14:13:20 UTC  sys [to al] (hook): psst\n")
        result = await liveroom("review", "stage", "--limit", "1", env=env)
        assert result.output.splitlines()[0] == \
            "room stage: 3 held for review (the oldest 1 shown)"
        result = await liveroom("review", "stage", "--approve", "1", env=env)
        assert (result.exit_code, result.output) == (
            0, "room stage: held message 1 of bob approved, sent as message 2\n")
        result = await liveroom("review", "stage", "--approve", "1", env=env)
        assert result.output == "room stage: held message 1 of bob approved, sent as message 2\n"
        result = await liveroom("review", "stage", "--approve", "2", env=env)
        assert result.output == ("room stage: held message 2 of host approved, sent as "
                                 "important message 3\n")
        result = await liveroom("review", "stage", "--deny", "3", env=env)
        assert (result.exit_code, result.output) == (
            0, "room stage: held message 3 of sys denied (dropped)\n")
        result = await liveroom("review", "stage", "--approve", "3", env=env)
        assert result.exit_code == 1
        assert result.output == "Error: held message 3 of room stage was denied already " \
                                "(HTTP 409)\n"
        result = await liveroom("review", "stage", "--deny", "9", env=env)
        assert result.exit_code == 1
        assert result.output.endswith("(HTTP 404)\n")
        listener = Listener(session, "stage", uid="fan")
        await listener.poll(node.url)
        assert listener.bodies() == ["hello", "darn it"]  # a first poll: no old important
        result = await liveroom("moderation", "stage", env=env)
        assert [line.split("  ", 2)[2] for line in result.output.splitlines()[1:]] == [
            "deny held message 3 of sys (held for: hook)", "approve held message 2 of host",
            "approve held message 1 of bob (held for: word: darn)"]


async def test_review_needs_the_admin_token() -> None:
    async with running_node() as node:
        for args in (["review", "stage"], ["review", "stage", "--deny", "1"]):
            result = await liveroom(*args, "--url", node.url, "--admin-token", PUBLISHER)
            assert (result.exit_code, result.output) == (
                1, "Error: the publisher token cannot do this (HTTP 403)\n")
            result = await liveroom(*args, "--url", node.url)
            assert result.exit_code == 1
            assert "(give --admin-token or set LIVEROOM_ADMIN_TOKEN) (HTTP 401)" in \
                result.output


@pytest.mark.parametrize(("args", "env"), [
    pytest.param(["serve", "--like-requests", "bogus"], {}, id="flag"),
    pytest.param(["serve"], {"LIVEROOM_LIKE_REQUESTS": "bogus"}, id="env"),
])
def test_a_renamed_settings_former_name_is_taken_for_a_release_with_a_warning(
        args: list[str], env: dict[str, str]) -> None:
    """``--like-requests`` became ``--likes-requests`` (one prefix for the
    like settings): the former flag and variable still set it, and say so."""
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, result.output
    said = flat(result.output)
    assert "--like-requests and LIVEROOM_LIKE_REQUESTS are deprecated" in said
    assert "use --likes-requests (LIVEROOM_LIKES_REQUESTS)" in said
    assert "--likes-requests" in said.split("Error:", 1)[1]  # the value reached the setting


def test_the_new_name_wins_over_the_former_and_help_shows_only_the_new() -> None:
    given = {"likes_taps": "5/s", "like_taps__former": "7/s", "likes_requests": None,
             "like_requests__former": "3/s"}
    warnings = take_former(given)
    assert given == {"likes_taps": "5/s", "likes_requests": "3/s"}
    assert len(warnings) == 2
    built, problems = settings_from(given)
    assert built is not None
    assert not problems
    assert built.likes_taps == parse_windows("5/s")
    assert built.likes_requests == parse_windows("3/s")
    text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--likes-taps" in text
    assert "--like-taps" not in text


async def test_send_for_a_uid_is_that_uids_own_unless_the_token_is_given_as_a_flag(
        session: aiohttp.ClientSession) -> None:
    """Issue 46: with the README's exports, every ``liveroom send --uid X`` went
    out with LIVEROOM_PUBLISHER_TOKEN, exempt from moderation: mute seemed not
    to work. The environment's token now speaks only where the backend must."""
    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER}
        await send(session, node.url, "stage", "the show starts")
        async with session.put(f"{node.url}/v1/admin/rooms/stage/muted/troll",
                               json={"seconds": 600},
                               headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
            assert resp.status == 200
        result = await liveroom("send", "stage", "spam", "--uid", "troll", env=env)
        assert result.exit_code == 1
        assert "muted" in result.output
        result = await liveroom("send", "stage", "a signal", "--uid", "host", "--important",
                                env=env)  # the backend must: the environment's token
        assert result.exit_code == 0, result.output
        result = await liveroom("send", "stage", "for troll", "--uid", "troll",
                                "--token", PUBLISHER, env=env)
        assert result.exit_code == 0, result.output
        assert "sent with the publisher token" in result.stderr


@pytest.mark.parametrize(("args", "said"), [
    (["filters", "--help"], "The word filter: lists of words, each with an action"),
    (["filters", "list", "--help"], "Print every word list, one a line"),
    (["filters", "put", "--help"], "Store the word list NAME, replacing a list of that name"),
    (["filters", "delete", "--help"], "Delete the word list NAME"),
])
def test_the_filters_commands_explain_themselves(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert said in text
    if len(args) > 2:
        for option, env in [("--url", "LIVEROOM_URL"),
                            ("--admin-token", "LIVEROOM_ADMIN_TOKEN")]:
            assert option in text
            assert f"env var: {env}" in text
        assert "--store" in text
    result = CliRunner().invoke(main, ["--help"])
    assert re.search(r"^\s+filters\b", result.output, re.MULTILINE), result.output


@pytest.mark.parametrize(("args", "said"), [
    (["filters", "put", "no/slash", "--action", "mask", "--word", "x"],
     "a list's name must match"),
    (["filters", "put", "spam", "--action", "mask"], "give the list's words: --word WORD"),
    (["filters", "put", "spam", "--word", "x"], "Missing option '--action'"),
    (["filters", "put", "spam", "--action", "drop", "--word", "x"], "'drop' is not one of"),
    (["filters", "put", "spam", "--action", "mask", "--word", "x", "--room", "a room"],
     "room must match"),
    (["filters", "delete", ".."], "a list's name must match"),
])
def test_bad_filters_input_is_refused_before_any_call(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, [*args, "--url", "http://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert said in flat(result.output)


def test_a_words_file_that_is_not_utf8_is_refused_with_a_clear_message(
        tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_bytes("广告\n".encode("gbk"))
    result = CliRunner().invoke(main, ["filters", "put", "ads", "--action", "block",
                                       "--words-file", str(words), "--url",
                                       "http://127.0.0.1:1", "--admin-token", "t"])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert "is not UTF-8 text" in flat(result.output), result.output


async def test_filters_commands_through_a_running_node(session: aiohttp.ClientSession,
                                                       tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("广告\n\n  free money  \n", encoding="utf-8")
    async with running_node() as node:
        env = {"LIVEROOM_URL": node.url, "LIVEROOM_ADMIN_TOKEN": ADMIN}
        result = await liveroom("filters", "put", "scams", "--action", "block", "--word",
                                "spam", "--words-file", str(words), "--room", "stage",
                                "--room", "hall", env=env)
        assert result.exit_code == 0, result.output
        assert re.fullmatch(r"word list scams: block, 3 words, rooms hall, stage "
                            r"\(version \d+\)\n", result.output), result.output
        async with session.post(f"{node.url}/v1/rooms/stage/messages",
                                json={"uid": "fan", "body": "FREE money"}) as resp:
            assert (resp.status, (await resp.json())["error"]) == (403, "filtered")
        result = await liveroom("filters", "put", "rude", "--action", "mask", "--word", "x",
                                env=env)
        assert result.output.startswith("word list rude: mask, 1 word, every room")
        result = await liveroom("filters", "list", env=env)
        assert re.fullmatch(rf"rude: mask, 1 word, every room \(put {WHEN}\)\n"
                            rf"scams: block, 3 words, rooms hall, stage \(put {WHEN}\)\n",
                            result.stdout), result.stdout
        result = await liveroom("filters", "list", "--words", env=env)
        assert re.fullmatch(r"rude: .*\n  x\nscams: .*\n  spam\n  广告\n  free money\n",
                            result.stdout), result.stdout
        result = await liveroom("filters", "put", "rude", "--action", "mask", "--word", "!!!",
                                env=env)
        assert result.exit_code == 1
        assert result.output.startswith("Error: the word '!!!' has no letter or digit")
        assert result.output.endswith("(HTTP 400)\n")
        result = await liveroom("filters", "delete", "rude", env=env)
        assert (result.exit_code, result.output) == (0, "word list rude deleted\n")
        result = await liveroom("filters", "delete", "rude", env=env)
        assert (result.exit_code, result.output) == (
            1, "Error: no word list is named rude (HTTP 404)\n")
        await liveroom("filters", "delete", "scams", env=env)
        result = await liveroom("filters", "list", env=env)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "no word lists\n")


async def test_filters_commands_on_the_store_reach_the_node(redis_url: str) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock) as node:
        result = await liveroom("filters", "put", "spam", "--action", "mask", "--word", "spam",
                                "--store", redis_url)
        assert result.exit_code == 0, result.output
        assert result.output.startswith("word list spam: mask, 1 word, every room (version ")
        filters = node.node.proxy.filters
        async with asyncio.timeout(10):  # read within the node's refresh period
            while "spam" not in filters.screens.lists:
                await clock.advance(0.25)
                await asyncio.sleep(0.01)
        result = await liveroom("filters", "list", "--store", redis_url)
        assert result.stdout.startswith("spam: mask, 1 word, every room (put ")
        result = await liveroom("filters", "delete", "spam", "--store", redis_url)
        assert (result.exit_code, result.output) == (0, "word list spam deleted\n")
        result = await liveroom("filters", "delete", "spam", "--store", redis_url)
        assert (result.exit_code, result.output) == (1, "Error: no word list is named spam\n")
        result = await liveroom("filters", "put", "bad", "--action", "mask", "--word", "?",
                                "--store", redis_url)
        assert result.exit_code == 1
        assert "has no letter or digit" in result.output
        async with asyncio.timeout(10):
            while filters.screens.lists:
                await clock.advance(0.25)
                await asyncio.sleep(0.01)
