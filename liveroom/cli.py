"""The ``liveroom`` command.

``liveroom serve`` runs every role in one process. Every option also reads an
environment variable (shown in ``--help``), so a container can be configured
without flags.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from . import __version__, build, sects
from .clock import SystemClock
from .errors import BadRequest, ConfigError, LiveroomError
from .model import check_name
from .sects import Sect
from .settings import (
    DEFAULTS,
    ENV_PREFIX,
    SECRET_SETTINGS,
    SECRETS,
    TICKET_KEY_MIN,
    TICKET_TTL,
    Settings,
    Spec,
    declared,
    default_text,
    env_of,
    flag_of,
    is_shared,
    settings_from,
    unset_secrets,
    weak_secrets,
)

# Each command imports what only it needs when it runs: `ticket` signs without
# aiohttp, `send` and `listen` are clients (aiohttp's) that load nothing of the
# server, and only `serve` imports the roles (tests/faces/test_packaging.py).
if TYPE_CHECKING:
    from .client import (
        Answer,
        AuditEntry,
        Client,
        ClientError,
        Message,
        PersonalMessage,
        Retry,
        RoomModeration,
        RoomSect,
        Sanction,
        VipChange,
    )
    from .node import Node
    from .store.base import Store
    from .whitelist import SectChange

URL_ENV, TICKET_ENV, UID_ENV = (ENV_PREFIX + name for name in ("URL", "TICKET", "UID"))
"""The clients' own environment variables (``listen``, ``send``, the operators'
commands), beside those of the settings they share with the server
(:func:`~liveroom.settings.env_of`: ``--admin-token``, ``--token``)."""
F = TypeVar("F", bound=Callable[..., Any])



def _announce(node: Node) -> None:
    s = node.settings
    click.echo(f"liveroom {__version__} node {s.name!r} listening on "
               f"http://{s.host}:{s.port} (store: {node.store.name})")
    click.echo(f"  build: {build.describe()}")
    click.echo(f"  auth: {s.auth}" + (f" ({len(s.ticket_keys)} ticket keys)"
                                      if s.auth == "ticket" else
                                      " (clients name their own uid)"))
    made_up = {name: value for name, value in node.generated.items()
               if name in ("admin_token", "publisher_token")}
    if made_up:
        # Ready to paste: the CLI and the examples in the README read these.
        click.echo("  tokens made up for this run (the memory store keeps nothing); "
                   "in another shell:")
        click.echo(f"    export {URL_ENV}=http://{s.host}:{s.port}")
        for name, value in made_up.items():
            click.echo(f"    export {env_of(name)}={value}")
    click.echo("  stop with Ctrl-C", nl=True)
    sys.stdout.flush()


class _KeyList(click.types.StringParamType):
    """Ticket keys (or trusted proxies): each ``--ticket-key`` one, the
    environment variable a comma-separated list."""

    name = "KEY"
    envvar_list_splitter = ","


def _store_problems(store: str, auth_given: bool,
                           secrets: dict[str, str | None]) -> list[str]:
    """What a node over a shared store (Redis: a deployment, not a demo) must
    be told rather than default to, one sentence each; on any store, tokens
    and a secret that are given must not be weak, nor the admin token the
    publisher's (the memory engine's listen on a port too; only the ones it
    makes up itself are sure to be strong)."""
    if not is_shared(store):
        return weak_secrets(secrets)
    problems = []
    if not auth_given:
        problems.append(
            f"--auth: a shared store ({store}) is a deployment: say who may speak with "
            f"--auth ticket --ticket-key KEY (signed tickets name the uid) or, knowingly, "
            f"--auth open (clients name their own uid); or set {env_of('auth')}")
    missing = unset_secrets(secrets)
    if missing:
        flags = ", ".join(flag_of(name) for name in missing)
        envs = ", ".join(env_of(name) for name in missing)
        problems.append(
            f"{flags}: every node over a shared store must be given the same tokens and "
            f"secret (made-up ones would differ between nodes): give {flags} (or {envs}; "
            f"`liveroom secrets` makes fresh ones)")
    problems += weak_secrets(secrets)
    return problems


def _refuse_all(problems: list[str]) -> None:
    """Stop ``serve`` before it starts, saying every problem at once: exit
    status 2 (a usage error)."""
    if len(problems) == 1:
        click.echo(f"Error: {problems[0]}", err=True)
    else:
        click.echo(f"Error: serve cannot start; {len(problems)} settings to fix:", err=True)
        for problem in problems:
            click.echo(f"  - {problem}", err=True)
    raise SystemExit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="liveroom")
def main() -> None:
    """liveroom: a long-polling live-room message server.

    Listeners long-poll GET /v1/rooms/ROOM/poll, senders POST
    /v1/rooms/ROOM/messages; important messages are never lost and huge rooms
    are served from one cached snapshot. Start with `liveroom serve`, then
    watch a room with `liveroom listen ROOM` and talk in it with `liveroom
    send ROOM TEXT`. The API is described at /openapi.json on every server.
    """


def _settings_options(command: F) -> F:
    """Every setting of :class:`~liveroom.settings.Settings` as an option of
    ``serve``, made from its declaration: ``--NAME`` and ``LIVEROOM_NAME``.
    Values reach :func:`~liveroom.settings.settings_from` as given (``None``
    when not given), so every problem is found in one round."""
    for name, spec, default in reversed(declared()):
        help_text = spec.help
        if spec.choices:
            help_text += f" One of: {', '.join(spec.choices)}."
        shown = default_text(name)
        if shown:
            help_text += f"  [default: {shown}]"
        if spec.many:
            option = click.option(flag_of(name), name, multiple=True, type=_KeyList(),
                                  envvar=env_of(name), show_envvar=True, help=help_text,
                                  metavar=spec.metavar or None)
        elif isinstance(default, bool):
            option = click.option(flag_of(name), name, is_flag=True, default=None,
                                  envvar=env_of(name), show_envvar=True, help=help_text)
        else:
            option = click.option(flag_of(name), name, default=None, envvar=env_of(name),
                                  show_envvar=True, metavar=_metavar(name, spec, default),
                                  help=help_text)
        command = option(command)
    return command


def _metavar(name: str, spec: Spec, default: Any) -> str:
    if spec.metavar:
        return spec.metavar
    if spec.choices:
        return "|".join(spec.choices).upper()
    if spec.parse is not None:
        return "LIST"
    return {int: "INTEGER", float: "SECONDS" if name.endswith(
        ("_ttl", "timeout", "_interval", "_every", "_window", "_refresh", "_tick",
         "_leeway", "_flush")) else "NUMBER"}.get(type(default), "TEXT")


@main.command()
@_settings_options
def serve(**given: Any) -> None:
    """Run every role (proxy, recvsvr, statsvr) in this process, or in each of
    --workers processes on one port.

    Every setting is a flag and a LIVEROOM_* environment variable (the flag's
    name in capitals); deploy/liveroom.env lists them all, docs/operations.md
    explains them. Problems are reported all at once, the store URL first.
    """
    from .store import check_store_url

    store = given["store"] or "memory"
    # Every problem in one round, the store URL first.
    problems: list[str] = []
    known_store = True
    try:
        check_store_url(store)
    except ConfigError as exc:
        problems.append(f"{exc.option}: {exc.message}")
        known_store = not exc.message.startswith("unknown store")
    built, found = settings_from(given)
    problems += [f"{p.option}: {p.message}" for p in found]
    if known_store:  # what is no store says nothing of what it needs
        problems += _store_problems(store, given["auth"] is not None,
                                           {name: given[name] for name in SECRET_SETTINGS})
    if problems or built is None:
        _refuse_all(problems)
    assert built is not None
    settings = built
    log_level = settings.log_level
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    workers = settings.workers
    if workers > 1:
        _supervise(settings, workers, log_level)
        return
    try:
        # No collections while the node imports and starts (node.run says why).
        gc.disable()
        from .node import run  # the roles and aiohttp's server: only serve needs them

        run(settings, announce=_announce)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.option) from None
    except OSError as exc:  # the port: in use, or not ours to take
        raise click.ClickException(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None


def _supervise(settings: Settings, workers: int, log_level: str) -> None:
    from .workers import CannotListen, supervise

    try:
        code = supervise(settings, workers, log_level=log_level)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.option) from None
    except CannotListen as exc:
        raise click.ClickException(str(exc)) from None
    if code:
        raise SystemExit(code)


# -- secrets ------------------------------------------------------------------------

@main.command("secrets")
def secrets_command() -> None:
    """Print fresh random values for every secret setting, as env-file lines.

    One LIVEROOM_NAME=VALUE line each (the admin and publisher tokens, the
    context secret, a ticket key and a metrics token; 32 random bytes each,
    URL-safe base64). Append them to a copy of deploy/liveroom.env, whose
    empty lines for them come earlier, so these win:

        liveroom secrets >> ~/liveroom.env

    Every node over one store must be given the same values.
    """
    for name in SECRETS:
        click.echo(f"{env_of(name)}={secrets.token_urlsafe(32)}")


# -- tickets ------------------------------------------------------------------------

def _uid(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name("uid", value)
    except BadRequest as exc:
        raise click.BadParameter(f"{value!r}: {exc.message}") from None


def _rooms(ctx: click.Context, param: click.Parameter,
           value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_room(ctx, param, room) for room in value)


@main.command()
@click.option("--uid", required=True, callback=_uid,
              help="The uid the ticket names (its sub claim).")
@click.option("--room", "rooms", multiple=True, callback=_rooms, metavar="ROOM",
              help="A room the ticket is good for; repeat for several. Required unless "
                   "--any-room.")
@click.option("--any-room", is_flag=True,
              help="Mint a ticket good for every room (it can create rooms by sending, "
                   "within --rooms-per-uid; it cannot read member lists).")
@click.option("--ttl", default=TICKET_TTL, show_default=True, type=click.IntRange(1),
              help="Seconds the ticket is valid.")
@click.option("--publish", is_flag=True,
              help="The holder may send important messages in its rooms.")
@click.option("--key", default=None,
              help="The HS256 key to sign with [default: the first of "
                   f"{env_of('ticket_keys')}].")
def ticket(uid: str, rooms: tuple[str, ...], any_room: bool, ttl: int, publish: bool,
           key: str | None) -> None:
    """Print one ticket for UID, signed as your backend would sign it.

    For trying things out: a server started with --auth ticket and the same
    key takes the uid from it. Pass it as Authorization: Bearer TICKET, or as
    ?ticket=TICKET on a poll.
    """
    if key is None:
        key = os.environ.get(env_of("ticket_keys"), "").split(",")[0].strip() or None
    if key is None:
        raise click.UsageError(f"give --key or set {env_of('ticket_keys')}")
    if len(key.encode()) < TICKET_KEY_MIN:
        raise click.BadParameter(f"a ticket key must be at least {TICKET_KEY_MIN} bytes",
                                 param_hint="--key")
    if not rooms and not any_room:
        raise click.UsageError("name the rooms the ticket is good for with --room ROOM "
                               "(repeat it), or mint one for every room with --any-room")
    if rooms and any_room:
        raise click.UsageError("--room and --any-room exclude each other")
    from proxy.tickets import mint  # PyJWT: only this command needs it

    click.echo(mint(key, uid, rooms=None if any_room else rooms, ttl=ttl, publish=publish))


# -- operators: the vip whitelist and the end of a broadcast ----------------------

DEFAULT_URL = "http://127.0.0.1:8080"
T = TypeVar("T")


def _clear(exc: ClientError, token_hint: str | None = None) -> click.ClickException:
    """A client error as the command's one-line failure (exit status 1)."""
    from .client import ApiError

    if isinstance(exc, ApiError):
        message = exc.message or exc.code
        if exc.status == 401 and token_hint:
            message += f" ({token_hint})"
        return click.ClickException(f"{message} (HTTP {exc.status})")
    return click.ClickException(str(exc))


def _operators_options(command: F) -> F:
    """The options every operators' command takes: where to send the change."""
    command = click.option(
        "--store", "store", default=None, metavar="URL",
        help="Change the store directly (redis://HOST:PORT/DB) instead of going "
             "through a running server; not with the embedded memory store, which "
             "lives inside the server.")(command)
    command = click.option(
        "--admin-token", envvar=env_of("admin_token"), show_envvar=True,
        help="The server's admin token (not needed with --store).")(command)
    command = click.option(
        "--url", default=DEFAULT_URL, show_default=True, envvar=URL_ENV,
        show_envvar=True, help="A running liveroom server (any node over the store).")(command)
    return command


def _room(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name("room", value)
    except BadRequest as exc:
        raise click.BadParameter(f"{value!r}: {exc.message}") from None


def _operate(url: str, admin_token: str | None, store: str | None,
             via_server: Callable[[Client], Awaitable[T]],
             via_store: Callable[[Store], Awaitable[T]]) -> T:
    """Run one operators' call against the server at ``url``, or the store."""
    from .client import Client, ClientError
    from .store import open_store

    if store is not None and not is_shared(store):
        raise click.BadParameter(
            "the memory store lives inside the server process: use --url to reach "
            "the running server instead", param_hint="--store")

    async def run() -> T:
        if store is None:
            async with Client(url, token=admin_token) as client:
                try:
                    return await via_server(client)
                except ClientError as exc:
                    raise _clear(exc, None if admin_token else
                                 f"give --admin-token or set {env_of('admin_token')}") from None
        try:
            engine = open_store(store, DEFAULTS.log_policy(), SystemClock(), node_id="cli")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--store") from None
        # No start(): a one-shot command needs no notify channel (the engine
        # connects on the first call), and closing a started redis engine while
        # Redis is down can hang in its reconnect loop.
        try:
            return await via_store(engine)
        except LiveroomError as exc:
            raise click.ClickException(exc.message) from None
        finally:
            await engine.close()

    return asyncio.run(run())


def _sect_change(call: Callable[[Store, int], Awaitable[SectChange]]
                 ) -> Callable[[Store], Awaitable[VipChange]]:
    """A sect change made directly in the store (``--store``)."""

    async def through_store(store: Store) -> VipChange:
        from .client import VipChange

        change = await call(store, int(SystemClock().time() * 1000))
        return VipChange(change.room, change.after.vip, change.moved)

    return through_store


async def _pin(store: Store, room: str, sect: Sect | None, now_ms: int) -> SectChange:
    """``room`` pinned to ``sect`` (``None``: unpinned) in the store itself."""
    from .whitelist import pin_room

    return await pin_room(store.operators, store.log, room, sect, now_ms)


async def _release(store: Store, room: str, now_ms: int) -> SectChange:
    """``room`` unpinned and moved to the normal sect in the store itself."""
    from .whitelist import release_room

    return await release_room(store.operators, room, now_ms)


def _said(change: VipChange, pinned: str | None = None) -> str:
    sect = "vip" if change.vip else "normal"
    if pinned is not None:
        return f"room {change.room} is pinned to the {sect} sect" + \
            ("" if change.changed else " (it was there already)")
    if change.changed:
        return f"room {change.room} is now vip" if change.vip else \
            f"room {change.room} is no longer vip"
    return f"room {change.room} was already vip" if change.vip else \
        f"room {change.room} was not vip"


@main.group()
def vip() -> None:
    """The sects: which rooms the vip sect serves.

    A vip room gets recvsvr caches and a pull budget of its own on every node
    (a storm in it cannot slow the pulls of other rooms), its online list is
    split over --vip-shards keys, and its answers carry a routing hint that
    spreads its listeners over the nodes (--vip-spread). Rooms move by
    themselves (--auto-vip: in at --vip-promote online, out below
    --vip-demote); a pinned room stays where it is pinned. Every node picks a
    change up within its --vip-refresh; the node that made it at once.
    """


@vip.command("add")
@click.argument("room", callback=_room)
@_operators_options
def vip_add(room: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Pin ROOM to the vip sect (as `vip pin ROOM vip`)."""
    change = _operate(url, admin_token, store, lambda c: c.vip_add(room),
                      _sect_change(lambda s, now: _pin(s, room, "vip", now)))
    click.echo(_said(change))


@vip.command("remove")
@click.argument("room", callback=_room)
@_operators_options
def vip_remove(room: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Unpin ROOM and move it to the normal sect now (the automatic rule may
    promote it again when it grows)."""
    change = _operate(url, admin_token, store, lambda c: c.vip_remove(room),
                      _sect_change(lambda s, now: _release(s, room, now)))
    click.echo(_said(change))


@vip.command("pin")
@click.argument("room", callback=_room)
@click.argument("sect", type=click.Choice(["vip", "normal"]))
@_operators_options
def vip_pin(room: str, sect: Sect, url: str, admin_token: str | None,
            store: str | None) -> None:
    """Pin ROOM to SECT (vip or normal), moving it there now: the automatic
    rule leaves it there until `vip unpin`."""
    change = _operate(url, admin_token, store, lambda c: c.vip_pin(room, sect),
                      _sect_change(lambda s, now: _pin(s, room, sect, now)))
    click.echo(_said(change, sect))


@vip.command("unpin")
@click.argument("room", callback=_room)
@_operators_options
def vip_unpin(room: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Give ROOM back to the automatic rule; it stays in its sect for now."""
    change = _operate(url, admin_token, store, lambda c: c.vip_unpin(room),
                      _sect_change(lambda s, now: _pin(s, room, None, now)))
    sect = "vip" if change.vip else "normal"
    click.echo(f"room {room} is unpinned (in the {sect} sect; the automatic rule decides)")


async def _sects_of_store(store: Store) -> list[RoomSect]:
    from .client import RoomSect
    from .whitelist import read_sects

    records = await read_sects(store.operators)
    return [RoomSect.of(sects.document(room, records[room])) for room in sorted(records)]


async def _sects_of_server(client: Client) -> list[RoomSect]:
    return list(await client.vip_sects())


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


@vip.command("list")
@_operators_options
def vip_list(url: str, admin_token: str | None, store: str | None) -> None:
    """Print the rooms in the vip sect, the pinned ones and those the rule is
    watching: one a line, with the sect, pinned or auto, and since when."""
    found = [s for s in _operate(url, admin_token, store, _sects_of_server, _sects_of_store)
             if s.vip or s.pinned or s.candidate_since is not None]
    width = max((len(s.room) for s in found), default=0)
    for s in found:
        line = f"{s.room:<{width}}  {'vip' if s.vip else 'normal':<6}  {s.mode:<6}  " \
               f"since {_when(s.since)}"
        if s.candidate_since is not None:
            line += f"  (moving to {'normal' if s.vip else 'vip'} if it stays, " \
                    f"since {_when(s.candidate_since)})"
        click.echo(line)
    if not found:
        click.echo("no vip rooms", err=True)


@main.group()
def room() -> None:
    """Operations on one room."""


@room.command("start")
@click.argument("room_name", metavar="ROOM", callback=_room)
@_operators_options
def room_start(room_name: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Open ROOM before its first message.

    Listeners who join before the first chat line are then counted online and
    as viewers from their first poll, and the room lives --room-ttl while it is
    read. A room that is open already is left as it is.
    """

    async def through_store(store: Store) -> tuple[str, int, bool]:
        started = await store.operators.start_broadcast(room_name)
        return started.epoch, started.broadcast, started.created

    async def through_server(c: Client) -> tuple[str, int, bool]:
        started = await c.start_broadcast(room_name)
        return started.epoch, started.broadcast, started.created

    epoch, broadcast, created = _operate(url, admin_token, store, through_server,
                                         through_store)
    state = "opened" if created else "was open already"
    click.echo(f"room {room_name} {state}: broadcast {broadcast} (epoch {epoch})")


@room.command("end")
@click.argument("room_name", metavar="ROOM", callback=_room)
@_operators_options
def room_end(room_name: str, url: str, admin_token: str | None, store: str | None) -> None:
    """End ROOM's broadcast and start the next one.

    The room's log starts empty in a new epoch: every listener resets into it
    with no recent messages (the ended broadcast's messages are dropped; seqs
    go on). Its viewers count starts a new history, at once counting everyone
    online (who polled in the last --online-ttl, 90 s: tabs closed in that
    time included, by design); the ended broadcast's viewers stay readable at
    GET /v1/rooms/ROOM/broadcasts.
    """

    async def through_store(store: Store) -> tuple[str, int]:
        ended = await store.operators.end_broadcast(room_name, int(SystemClock().time() * 1000),
                                      int(DEFAULTS.history_ttl * 1000))
        return ended.epoch, ended.broadcast

    async def through_server(c: Client) -> tuple[str, int]:
        ended = await c.end_broadcast(room_name)
        return ended.epoch, ended.broadcast

    epoch, broadcast = _operate(url, admin_token, store, through_server, through_store)
    click.echo(f"room {room_name}: broadcast {broadcast - 1} ended, broadcast {broadcast} "
               f"started (epoch {epoch})")


# -- a room from a terminal: listen and send --------------------------------------

def _url_option(command: F) -> F:
    return click.option(
        "--url", default=DEFAULT_URL, show_default=True, envvar=URL_ENV,
        show_envvar=True, help="A running liveroom server (any node).")(command)


def _ticket_option(command: F) -> F:
    return click.option(
        "--ticket", envvar=TICKET_ENV, show_envvar=True,
        help="A ticket your backend signed (servers run with --auth ticket): it names "
             "the uid; see `liveroom ticket`. Given as a flag, it wins over the "
             f"environment's {UID_ENV} (and, for send, "
             f"{env_of('publisher_token')}).")(command)


def _flags_first(ctx: click.Context, credentials: tuple[str, ...]) -> tuple[str, list[str]]:
    """Whose word a command takes: flags first, then the environment.

    ``credentials`` names the command's parameters that say who speaks
    (``ticket``, ``token``). When one is given as a flag, those that came from
    the environment are left aside, and so is a uid from the environment when
    the flag is ``--ticket`` (the ticket names its uid): a shell that exports
    the tokens (the production recipe's) cannot outvote a ticket typed on the
    command line. Returns the flags given (``--ticket``...) and the
    parameters left aside, for the caller to drop."""
    def given(name: str) -> ParameterSource | None:
        return ctx.get_parameter_source(name)

    flags = [name for name in credentials if given(name) is ParameterSource.COMMANDLINE]
    if not flags:
        return "", []
    aside = [name for name in credentials if given(name) is ParameterSource.ENVIRONMENT]
    if "ticket" in flags and given("uid") is ParameterSource.ENVIRONMENT:
        aside.append("uid")
    return " and ".join(f"--{name.replace('_', '-')}" for name in flags), aside


def _left_aside_note(ctx: click.Context, flags: str, aside: list[str]) -> str:
    """The ``--`` line saying which environment variables a flag outvoted."""
    envs = [env for param in ctx.command.params if param.name in aside
            for env in ([param.envvar] if isinstance(param.envvar, str)
                        else param.envvar or [])]
    verb = "is" if len(envs) == 1 else "are"
    return (f"-- {' and '.join(envs)} from the environment {verb} not used: the {flags} "
            f"given speaks (a flag wins over the environment)")


def _optional_uid(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else _uid(ctx, param, value)


def _body_text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)


def _message_line(message: Message) -> str:
    mark = " [important]" if message.important else ""
    if message.recalled:
        return f"{message.seq}{mark} [recalled] {message.uid}"
    return f"{message.seq}{mark} {message.uid}: {_body_text(message.body)}"


def _personal_line(message: PersonalMessage) -> str:
    if message.recalled:
        return f"p{message.pseq} [to {message.to}] [recalled] {message.uid}"
    return f"p{message.pseq} [to {message.to}] {message.uid}: {_body_text(message.body)}"


def _notes(answer: Answer, first: bool, slow: int = 0) -> list[str]:
    """What an answer says besides its messages, as ``--`` lines (stderr);
    ``slow`` is the slow mode the listener knew before it."""
    notes = []
    if first:
        notes.append(f"-- listening to {answer.room} (epoch {answer.epoch}, seq {answer.seq}, "
                     f"{answer.online} online)")
    elif answer.reset:
        notes.append(f"-- reset: the room goes on in epoch {answer.epoch} from seq "
                     f"{answer.seq} (a broadcast ended, or its log restarted)")
    if answer.gap or answer.igap:
        missed = [f"{answer.gap} message{'s' * (answer.gap != 1)}"] if answer.gap else []
        if answer.igap:
            missed.append(f"{answer.igap} important")
        notes.append(f"-- gap: missed {' and '.join(missed)} (gone before this listener "
                     f"read them)")
    if answer.pgap:
        notes.append(f"-- gap: missed {answer.pgap} personal message"
                     f"{'s' * (answer.pgap != 1)} (gone before this listener read them)")
    if answer.recalled or answer.precalled:
        recalled = [str(seq) for seq in answer.recalled]
        recalled += [f"p{pseq}" for pseq in answer.precalled]
        notes.append(f"-- recalled: {', '.join(recalled)}")
    if answer.slow != slow:
        notes.append(f"-- slow mode: one message per {answer.slow} s" if answer.slow
                     else "-- slow mode: off")
    if answer.ranking is not None:
        top = ", ".join(f"{uid} {score}" for uid, score in answer.ranking.top)
        notes.append(f"-- ranking: {top or 'no gifts (the broadcast ended)'}")
    return notes


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.option("--uid", callback=_optional_uid, envvar=UID_ENV, show_envvar=True,
              help="Who listens (open mode) [default: a made-up listener-XXXXXX; with "
                   "--ticket, the ticket's].")
@_ticket_option
@_url_option
@click.option("--recent", type=click.IntRange(0, DEFAULTS.recent_max), default=None,
              help=f"Normal messages to show from before now (0-{DEFAULTS.recent_max}) "
                   f"[default: the server's, {DEFAULTS.recent_default}].")
@click.option("--timeout", type=click.IntRange(1, DEFAULTS.poll_timeout_max),
              default=int(DEFAULTS.poll_timeout), show_default=True,
              help="Seconds the server holds each poll when nothing happens.")
@click.option("--json", "as_json", is_flag=True,
              help="Print each message as one JSON object a line (seq, uid, important, "
                   "ts, body; a recalled one with a null body and \"recalled\": true), "
                   "and each note on stderr as {\"note\": TEXT}.")
def listen(room_name: str, uid: str | None, ticket: str | None, url: str,
           recent: int | None, timeout: int, as_json: bool) -> None:
    """Print ROOM's messages as they arrive, until Ctrl-C.

    Each message is one line on stdout, `SEQ UID: BODY` (a body that is not a
    string printed as JSON), important ones marked `[important]` and printed
    before the chat of the same answer; the listener's own personal messages
    come first, `pPSEQ [to UID] SENDER: BODY`. Lines starting with `--` on stderr say
    where listening began, when the room was reset (a broadcast ended), how
    many messages were missed (gap), the room's top givers when they change
    (`-- ranking: UID SCORE, ...`, best first), the messages a moderator (or
    their sender) recalled (`-- recalled: SEQ, ...`, `pPSEQ` for the
    listener's personal ones: hide them; a recalled message not yet shown
    comes as `SEQ [recalled] UID`, without its body),
    and slow mode when it starts or changes (`-- slow mode: one message per
    S s`; `-- slow mode: off` once lifted). Network errors and busy servers
    (429, 503) are retried; a refusal (a bad ticket) exits with status 1.
    Ctrl-C or SIGTERM stops at once, exit status 0.

    Flags first, then the environment: a --ticket given as a flag names the
    listener, and LIVEROOM_UID from the environment is not used.
    """
    from .client import Client, ClientError

    ctx = click.get_current_context()
    flags, aside = _flags_first(ctx, ("ticket",))
    if "uid" in aside:
        uid = None
    if uid is None and ticket is None:
        uid = f"listener-{secrets.token_hex(3)}"

    def note(line: str) -> None:
        if as_json:
            click.echo(json.dumps({"note": line.removeprefix("-- ")}), err=True)
        else:
            click.echo(line, err=True)

    def retrying(retry: Retry) -> None:
        why = f"HTTP {retry.status}" if retry.status else "network"
        note(f"-- {why}: {retry.reason}; again in {retry.delay:.1f} s")

    async def run() -> None:
        async with Client(url, ticket=ticket) as client:
            listening = client.listen(room_name, uid=uid, timeout=timeout, recent=recent,
                                      on_retry=retrying)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, listening.stop)
            first = True
            slow = 0
            async for answer in listening:
                for line in _notes(answer, first, slow):
                    note(line)
                first = False
                slow = answer.slow
                for mine in answer.personal:
                    click.echo(json.dumps({"pseq": mine.pseq, "n": mine.n, "uid": mine.uid,
                                           "to": mine.to, "important": True, "ts": mine.ts,
                                           "body": mine.body,
                                           **({"recalled": True} if mine.recalled else {})},
                                          ensure_ascii=False)
                               if as_json else _personal_line(mine))
                for message in answer.delivered:
                    click.echo(json.dumps({"seq": message.seq, "uid": message.uid,
                                           "important": message.important,
                                           "ts": message.ts, "body": message.body,
                                           **({"recalled": True} if message.recalled
                                              else {})},
                                          ensure_ascii=False)
                               if as_json else _message_line(message))
                sys.stdout.flush()

    try:
        asyncio.run(run())
    except ClientError as exc:
        if aside:
            note(_left_aside_note(ctx, flags, aside))
        raise _clear(exc, None if ticket else f"give --ticket or set {TICKET_ENV}") from None


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("text")
@click.option("--uid", callback=_optional_uid, envvar=UID_ENV, show_envvar=True,
              help="Who sends (open mode, or for the --token holder) [default: a "
                   "made-up sender-XXXXXX, said on stderr; with --ticket, the ticket's].")
@click.option("--important", is_flag=True,
              help="An important message (a system signal: never lost, delivered first); "
                   "needs --token or a ticket minted with --publish.")
@click.option("--to", callback=_optional_uid, default=None, metavar="UID",
              help="A personal message for UID alone (important; needs --token or a "
                   "ticket minted with --publish); prints its pseq, its position among "
                   "the room's personal messages (not a seq).")
@click.option("--json", "as_json", is_flag=True,
              help="TEXT is a JSON value (an object, a number...), sent as the body as is.")
@click.option("--client-msg-id", default=None, metavar="ID",
              help="Sending twice with one id within the server's --dedup-ttl "
                   f"({default_text('dedup_ttl')} s unless told otherwise) stores it once "
                   "[default: made up].")
@_ticket_option
@click.option("--token", envvar=env_of("publisher_token"), show_envvar=True,
              help="The publisher (or admin) token: your backend speaking for --uid, not "
                   "rate limited; needed for --important without a publishing ticket. "
                   "Not used from the environment when --ticket is given as a flag.")
@_url_option
def send(room_name: str, text: str, uid: str | None, important: bool, to: str | None,
         as_json: bool, client_msg_id: str | None, ticket: str | None, token: str | None,
         url: str) -> None:
    """Send TEXT to ROOM and print its seq (with --to, a line saying its pseq).

    The body is TEXT as a string (or, with --json, the JSON value TEXT is). A
    rate limit (429) or a busy server (503) is waited out (its Retry-After) and
    the send tried again, up to 3 times, with one client_msg_id, so it is
    stored once. A refusal exits with status 1 and the server's message.

    Who speaks, flags first, then the environment: a --ticket or --token given
    as a flag is used, and LIVEROOM_TICKET or LIVEROOM_PUBLISHER_TOKEN from the
    environment is not (with a --ticket flag, nor is LIVEROOM_UID: the ticket
    names the uid). Given both the same way, the token speaks, for --uid.
    """
    from .client import Client, ClientError

    ctx = click.get_current_context()
    flags, aside = _flags_first(ctx, ("ticket", "token"))
    if "ticket" in aside:
        ticket = None
    if "token" in aside:
        token = None
    if "uid" in aside:
        uid = None
    if uid is None and ticket is None:
        uid = f"sender-{secrets.token_hex(3)}"
        click.echo(f"-- sending as {uid} (give --uid to choose)", err=True)
    body: Any = text
    if as_json:
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="TEXT") from None

    def retrying(retry: Retry) -> None:
        why = f"HTTP {retry.status}" if retry.status else "network"
        click.echo(f"-- {why}: {retry.reason}; again in {retry.delay:.1f} s", err=True)

    async def run() -> str:
        async with Client(url, ticket=ticket, token=token) as client:
            sent = await client.send(room_name, body, uid=uid, important=important,
                                     client_msg_id=client_msg_id, to=to, on_retry=retrying)
            if sent.private is False:
                click.echo(f"-- not private: the server runs --auth open, where any client "
                           f"can read {to}'s personal messages (--auth ticket makes them "
                           f"{to}'s alone)", err=True)
            if sent.pseq is None:
                return str(sent.seq)
            return (f"personal message to {to}: pseq {sent.pseq}, its position among "
                    f"{room_name}'s personal messages (numbered apart from the room's seq)")

    try:
        said = asyncio.run(run())
    except ClientError as exc:
        if aside:
            click.echo(_left_aside_note(ctx, flags, aside), err=True)
        hint = (f"give --token or set {env_of('publisher_token')}"
                if (important or to) and not token
                else None if ticket or token else f"give --ticket or set {TICKET_ENV}")
        raise _clear(exc, hint) from None
    click.echo(said)


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.option("--count", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Taps in this request (a client batches its taps).")
@click.option("--uid", callback=_optional_uid, envvar=UID_ENV, show_envvar=True,
              help="Who taps (open mode) [default: a made-up fan-XXXXXX; with --ticket, the "
                   "ticket's].")
@_ticket_option
@_url_option
def like(room_name: str, count: int, uid: str | None, ticket: str | None, url: str) -> None:
    """Tap COUNT likes in ROOM and print the room's total as the node knows it.

    Each uid may send a few like requests a second (the server's
    --like-requests and --like-taps): past them the node answers 429 and this
    exits with status 1 and its message."""
    from .client import Client, ClientError

    if uid is None and ticket is None:
        uid = f"fan-{secrets.token_hex(3)}"
        click.echo(f"-- tapping as {uid} (give --uid to choose)", err=True)

    async def run() -> int:
        async with Client(url, ticket=ticket) as client:
            return await client.like(room_name, count, uid=uid)

    try:
        total = asyncio.run(run())
    except ClientError as exc:
        raise _clear(exc, None if ticket or uid else f"give --ticket or set {TICKET_ENV}") \
            from None
    click.echo(f"{room_name}: {total} likes")


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.option("--uid", callback=_optional_uid, required=True, help="The giver.")
@click.option("--value", type=click.IntRange(1, 10**12), required=True,
              help="What the gift is worth, in your backend's unit.")
@click.option("--gift", "name", default="gift", show_default=True, help="The gift's name.")
@_ticket_option
@click.option("--token", envvar=env_of("publisher_token"), show_envvar=True,
              help="The publisher (or admin) token: gifts are your backend's call (or a "
                   "ticket minted with --publish).")
@_url_option
def gift(room_name: str, uid: str, value: int, name: str, ticket: str | None,
         token: str | None, url: str) -> None:
    """Give UID's gift worth VALUE in ROOM and print the giver's rank and score.

    The room's ranking is for its current broadcast (`liveroom leaderboard
    ROOM`); ending the broadcast freezes it."""
    from .client import Client, ClientError

    async def run() -> str:
        async with Client(url, ticket=ticket, token=token) as client:
            given = await client.gift(room_name, uid, value, name)
        return (f"{room_name}: {uid} is number {given.rank} with {given.score} "
                f"(the room's gifts: {given.total})")

    try:
        said = asyncio.run(run())
    except ClientError as exc:
        raise _clear(exc, None if token or ticket
                     else f"give --token or set {env_of('publisher_token')}") from None
    click.echo(said)


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Givers to list.")
@_url_option
def leaderboard(room_name: str, limit: int, url: str) -> None:
    """Print ROOM's top givers in its current broadcast, best first, and its gift total."""
    from .client import Client, ClientError

    async def run() -> list[str]:
        async with Client(url) as client:
            ranking = await client.leaderboard(room_name, limit=limit)
        lines = [f"{place:>3}. {uid}  {score}" for place, (uid, score)
                 in enumerate(ranking.top, 1)]
        return [*lines, f"{room_name}: {ranking.count} gifts, {ranking.total} in all"]

    try:
        lines = asyncio.run(run())
    except ClientError as exc:
        raise _clear(exc, None) from None
    for line in lines:
        click.echo(line)


# -- moderation: recall, mute, ban, slow mode and the audit ------------------------

MODERATION_SECONDS_MAX = 30 * 86_400
"""The longest mute, ban or slow mode (the server's and the store's limit)."""
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.ASCII)


def seconds_of(text: str) -> int | None:
    """The seconds ``text`` spells: plain seconds (``90``), or numbers with a
    unit each, largest first (``30s``, ``10m``, ``2h``, ``1d``, ``1h30m``);
    ``None`` when it spells no duration."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+", text, re.ASCII):
        return int(text)
    found = _DURATION.fullmatch(text)
    if not text or found is None:
        return None
    return sum(int(n) * size for n, (_, size) in zip(found.groups(), _UNITS, strict=True)
               if n)


def duration_text(seconds: int) -> str:
    """``seconds`` as :func:`seconds_of` reads it back: ``90`` is ``1m30s``."""
    parts = []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


class _Duration(click.types.IntParamType):
    """A duration (:func:`seconds_of`) from ``low`` seconds to 30 days (a
    whole number of seconds, as ``click.INT`` makes one)."""

    name = "duration"

    def __init__(self, low: int) -> None:
        self.low = low

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        seconds = value if isinstance(value, int) and not isinstance(value, bool) \
            else seconds_of(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not a duration: give seconds (90) or numbers with a "
                      f"unit, s, m, h or d (30s, 10m, 2h, 1d, 1h30m)", param, ctx)
        if not self.low <= seconds <= MODERATION_SECONDS_MAX:
            self.fail(f"{value!r} is out of range: from {duration_text(self.low)} to "
                      f"{duration_text(MODERATION_SECONDS_MAX)}", param, ctx)
        return seconds


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("seq", type=click.IntRange(1))
@click.option("--uid", callback=_optional_uid, default=None,
              help="Recall as this sender, one of its own messages, on a server in open "
                   "mode (within the server's --recall-window, 120 s, of sending it); "
                   "the admin token is not used then.")
@click.option("--personal", is_flag=True,
              help="SEQ is a personal message's pseq (as `liveroom send --to` prints it): "
                   "the backend's call (the admin or publisher token, or a ticket minted "
                   "with --publish); its addressee is told.")
@click.option("--ticket", envvar=TICKET_ENV, show_envvar=True,
              help="A ticket (servers run with --auth ticket): its uid recalls its own "
                   "messages within the window, one minted with --publish any message. "
                   "Given as a flag, it wins over the environment's admin token.")
@click.option("--admin-token", envvar=env_of("admin_token"), show_envvar=True,
              help="The server's admin token (or the publisher token): recalls any "
                   "message the room keeps.")
@_url_option
def recall(room_name: str, seq: int, uid: str | None, personal: bool, ticket: str | None,
           admin_token: str | None, url: str) -> None:
    """Recall message SEQ of ROOM: its body is gone for good, and every
    listener is told.

    The admin token (from the environment, as for the other operators'
    commands), the publisher token or a ticket minted with --publish recall
    any message the room still keeps, normal or important; a sender recalls
    its own within the server's --recall-window (120 s): --uid UID on a
    server in open mode, or its --ticket. Listeners learn of it in their next
    answer (`liveroom listen` notes `-- recalled: SEQ`), and every later
    answer, on every node, carries the message without its body. Recalling
    twice answers the same; a message the room no longer keeps is an error
    (HTTP 404). With --personal, SEQ is a personal message's pseq: its
    addressee is told (`-- recalled: pPSEQ`). Prints one line: which message,
    whose.
    """
    from .client import Client, ClientError

    ctx = click.get_current_context()
    if uid is not None and personal:
        raise click.UsageError("a personal message is the backend's: --uid cannot recall "
                               "one (give the admin or publisher token, or a publishing "
                               "--ticket)")
    if uid is not None:
        if ctx.get_parameter_source("admin_token") is ParameterSource.COMMANDLINE:
            raise click.UsageError("--uid recalls as that sender, --admin-token as a "
                                   "moderator: give one of them")
        admin_token = None  # the sender speaks, not the environment's token
    flags, aside = _flags_first(ctx, ("ticket", "admin_token"))
    if "ticket" in aside:
        ticket = None
    if "admin_token" in aside:
        admin_token = None
    if not (uid or ticket or admin_token):
        raise click.UsageError(
            f"who recalls? Give --admin-token (or set {env_of('admin_token')}) to recall "
            f"any message, --uid UID to recall UID's own (open mode), or --ticket")

    async def run() -> str:
        async with Client(url, ticket=ticket, token=admin_token) as client:
            if personal:
                mine = await client.recall_personal(room_name, seq)
                return (f"room {mine.room}: personal message p{mine.pseq} of {mine.uid} to "
                        f"{mine.to} recalled ({mine.to} is told)")
            done = await client.recall(room_name, seq, uid=uid)
            return (f"room {done.room}: message {done.seq} of {done.uid} recalled (every "
                    f"listener is told)")

    try:
        said = asyncio.run(run())
    except ClientError as exc:
        if aside:
            click.echo(_left_aside_note(ctx, flags, aside), err=True)
        raise _clear(exc) from None
    click.echo(said)


def _reason_option(command: F) -> F:
    return click.option(
        "--reason", default="", metavar="TEXT",
        help="Why (at most 200 characters), kept in the room's audit "
             "(`liveroom moderation`).")(command)


async def _act_in_store(store: Store, room: str, action: str, target: str, seconds: int,
                        reason: str) -> tuple[int, Any]:
    """One moderation action taken in the store itself (``--store``): every
    node reads it from the store's journal within about a second. The time
    it was taken and the room's moderation after it (``None``: none left)."""
    from .store.base import AuditEntry as StoredEntry

    now_ms = int(SystemClock().time() * 1000)
    try:
        await store.moderation.act(room, StoredEntry(now_ms, "admin", action, target, seconds,
                                                     reason), now_ms)
    except ValueError as exc:  # what the store refuses (a reason too long, a full room)
        raise click.ClickException(str(exc)) from None
    return now_ms, (await store.moderation.rooms([room], now_ms)).get(room)


def _stored_sanction(room: str, kind: str, uid: str, now_ms: int,
                     state: Any) -> Sanction | None:
    """``uid``'s mute or ban (``kind``: ``muted``, ``banned``) in a room's
    moderation as the store reads it, as the client shows it."""
    from .client import Sanction

    given = None if state is None else next(
        (s for s in getattr(state, kind) if s.uid == uid), None)
    if given is None:
        return None
    left = None if not given.until_ms else max(0, -(-(given.until_ms - now_ms) // 1000))
    return Sanction(room, uid, given.until_ms, left, given.reason, given.by, given.at_ms)


def _sanctioned(room: str, uid: str, kind: str, seconds: int, sanction: Sanction | None,
                reason: str) -> str:
    """The line saying a mute or ban was given."""
    verb = "muted in" if kind == "muted" else "banned from"
    how = "until lifted"
    if seconds:
        how = f"for {duration_text(seconds)}"
        if sanction is not None:
            how += f" (until {_when(sanction.until_ms)})"
    return f"{uid} is {verb} room {room} {how}" + (f": {reason}" if reason else "")


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("uid", callback=_uid)
@click.option("--for", "seconds", type=_Duration(1), required=True, metavar="DURATION",
              help="How long: 30s, 10m, 2h, 1d, 1h30m, or plain seconds; at most 30d.")
@_reason_option
@_operators_options
def mute(room_name: str, uid: str, seconds: int, reason: str, url: str,
         admin_token: str | None, store: str | None) -> None:
    """Mute UID in ROOM for a while: its sends are refused (HTTP 403 muted,
    saying for how long); it still listens.

    Muting it again replaces the mute; `liveroom unmute` lifts it early.
    Every node applies it within about a second. Prints one line: who, for
    how long (until when), why.
    """

    async def through_store(s: Store) -> Sanction | None:
        now_ms, state = await _act_in_store(s, room_name, "mute", uid, seconds, reason)
        return _stored_sanction(room_name, "muted", uid, now_ms, state)

    sanction = _operate(url, admin_token, store,
                        lambda c: c.mute(room_name, uid, seconds, reason), through_store)
    click.echo(_sanctioned(room_name, uid, "muted", seconds, sanction, reason))


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("uid", callback=_uid)
@_operators_options
def unmute(room_name: str, uid: str, url: str, admin_token: str | None,
           store: str | None) -> None:
    """Lift UID's mute in ROOM: it may send again at once (a uid that was not
    muted is no error)."""

    async def through_store(s: Store) -> None:
        await _act_in_store(s, room_name, "unmute", uid, 0, "")

    _operate(url, admin_token, store, lambda c: c.unmute(room_name, uid), through_store)
    click.echo(f"{uid}'s mute in room {room_name} is lifted")


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("uid", callback=_uid)
@click.option("--for", "seconds", type=_Duration(1), default=None, metavar="DURATION",
              help="How long: 30s, 10m, 2h, 1d, 1h30m, or plain seconds; at most 30d "
                   "[default: until lifted].")
@_reason_option
@_operators_options
def ban(room_name: str, uid: str, seconds: int | None, reason: str, url: str,
        admin_token: str | None, store: str | None) -> None:
    """Ban UID from ROOM, until lifted or --for a while: its polls and sends
    are refused (HTTP 403 banned).

    Its polls held on any node are answered so within about a second, and it
    leaves the room's online list (within a few seconds). Banning it again
    replaces the ban; `liveroom unban` lifts it. Prints one line: who, for
    how long, why.
    """
    given = seconds or 0

    async def through_store(s: Store) -> Sanction | None:
        now_ms, state = await _act_in_store(s, room_name, "ban", uid, given, reason)
        return _stored_sanction(room_name, "banned", uid, now_ms, state)

    sanction = _operate(url, admin_token, store,
                        lambda c: c.ban(room_name, uid, given, reason), through_store)
    click.echo(_sanctioned(room_name, uid, "banned", given, sanction, reason))


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("uid", callback=_uid)
@_operators_options
def unban(room_name: str, uid: str, url: str, admin_token: str | None,
          store: str | None) -> None:
    """Lift UID's ban from ROOM: it may listen and send again at once (a uid
    that was not banned is no error)."""

    async def through_store(s: Store) -> None:
        await _act_in_store(s, room_name, "unban", uid, 0, "")

    _operate(url, admin_token, store, lambda c: c.unban(room_name, uid), through_store)
    click.echo(f"{uid}'s ban from room {room_name} is lifted")


def _slow_text(seconds: int) -> str:
    return f"slow mode, one message per {seconds} s" if seconds else "slow mode off"


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.argument("seconds", type=_Duration(0), metavar="SECONDS")
@_operators_options
def slow(room_name: str, seconds: int, url: str, admin_token: str | None,
         store: str | None) -> None:
    """Put ROOM in slow mode: each uid may send one normal message per
    SECONDS (0 lifts it; 30s, 10m... read as durations, at most 30d).

    A send past it gets HTTP 429 with Retry-After; important messages and
    the backend's tokens are exempt. Listeners' answers carry it (`liveroom
    listen` notes `-- slow mode: one message per S s`). Prints the room's
    slow mode now.
    """

    async def through_store(s: Store) -> int:
        _, state = await _act_in_store(s, room_name, "slow", "", seconds, "")
        return 0 if state is None else int(state.slow)

    now = _operate(url, admin_token, store, lambda c: c.slow(room_name, seconds),
                   through_store)
    click.echo(f"room {room_name}: {_slow_text(now)} per uid" if now
               else f"room {room_name}: slow mode off")


def _action_text(entry: AuditEntry) -> str:
    """One action of the audit, in words."""
    action, target, seconds = entry.action, entry.target, entry.seconds
    if action in ("mute", "ban"):
        text = f"{action} {target} " + (f"for {duration_text(seconds)}" if seconds
                                        else "until lifted")
    elif action == "slow":
        text = _slow_text(seconds)
    elif action == "recall":
        lane, _, seq = target.partition(":")
        text = {"room": f"recall message {seq}",
                "personal": f"recall personal message p{seq}"}.get(lane, f"recall {target}")
    else:
        text = f"{action} {target}".rstrip()
    return text + (f": {entry.reason}" if entry.reason else "")


@main.command()
@click.argument("room_name", metavar="ROOM", callback=_room)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Actions of the audit to print, newest first.")
@_operators_options
def moderation(room_name: str, limit: int, url: str, admin_token: str | None,
               store: str | None) -> None:
    """Print ROOM's moderation: slow mode, how many uids are muted and
    banned, then the current broadcast's actions, newest first, one a line
    (when, who, what, why).

    `liveroom room end` archives the audit with the broadcast; mutes, bans
    and slow mode stay with the room.
    """

    async def through_store(s: Store) -> RoomModeration:
        from .client import AuditEntry, RoomModeration

        now_ms = int(SystemClock().time() * 1000)
        state = (await s.moderation.rooms([room_name], now_ms)).get(room_name)
        entries = await s.moderation.audit(room_name, limit)
        return RoomModeration(
            room_name, 0 if state is None else state.slow,
            0 if state is None else len(state.muted), 0 if state is None else len(state.banned),
            tuple(AuditEntry(e.at_ms, e.by, e.action, e.target, e.seconds, e.reason)
                  for e in entries))

    state = _operate(url, admin_token, store, lambda c: c.moderation(room_name, limit),
                     through_store)
    click.echo(f"room {state.room}: {_slow_text(state.slow)}; {state.muted} muted, "
               f"{state.banned} banned")
    width = max((len(e.by) for e in state.audit), default=0)
    for entry in state.audit:
        click.echo(f"{_when(entry.at_ms)}  {entry.by:<{width}}  {_action_text(entry)}")
    if not state.audit:
        click.echo("no moderation in this broadcast yet")


if __name__ == "__main__":  # pragma: no cover
    main()
