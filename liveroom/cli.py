"""The ``liveroom`` command.

``liveroom serve`` runs every role in one process. Every option also reads an
environment variable (shown in ``--help``), so a container can be configured
without flags.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import click
from aiohttp import web

from . import __version__
from .errors import BadRequest
from .model import check_name
from .node import Node, build_app
from .settings import Settings

_D = Settings()
_STORE_HELP = ("Where room logs live: 'memory' (embedded, one process, nothing to "
               "install) or redis://HOST:PORT/DB (many processes and hosts).")


def _announce(node: Node) -> None:
    s = node.settings
    click.echo(f"liveroom {__version__} node {s.name!r} listening on "
               f"http://{s.host}:{s.port} (store: {node.store.name})")
    for name, value in node.generated.items():
        kept = "kept in the store" if node.store.name != "memory" else "generated"
        click.echo(f"  {name.replace('_', ' ')} ({kept}): {value}")
    click.echo("  stop with Ctrl-C", nl=True)
    sys.stdout.flush()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="liveroom")
def main() -> None:
    """liveroom: a long-polling live-room message server.

    Listeners long-poll GET /v1/rooms/ROOM/poll, senders POST
    /v1/rooms/ROOM/messages; important messages are never lost and huge rooms
    are served from one cached snapshot. Start with `liveroom serve`.
    """


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="LIVEROOM_HOST",
              show_envvar=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, envvar="LIVEROOM_PORT",
              show_envvar=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--store", default="memory", show_default=True, envvar="LIVEROOM_STORE",
              show_envvar=True, help=_STORE_HELP)
@click.option("--admin-token", envvar="LIVEROOM_ADMIN_TOKEN", show_envvar=True,
              help="Bearer token of operators (also publishes). Made up and printed if "
                   "unset; with Redis it is kept in the store so every node shares it.")
@click.option("--publisher-token", envvar="LIVEROOM_PUBLISHER_TOKEN", show_envvar=True,
              help="Bearer token the business backend uses for important messages. "
                   "Made up and printed if unset (kept in the store with Redis).")
@click.option("--node-id", default="", envvar="LIVEROOM_NODE_ID", show_envvar=True,
              help="Stable id of this node among those sharing a store [default: HOST:PORT].")
@click.option("--secret", envvar="LIVEROOM_SECRET", show_envvar=True,
              help="Key that signs listener contexts; every node must share it. "
                   "Kept in the store when unset.")
@click.option("--log-level", default="info", show_default=True, envvar="LIVEROOM_LOG_LEVEL",
              show_envvar=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.option("--log-cap", default=_D.log_cap, show_default=True, envvar="LIVEROOM_LOG_CAP",
              show_envvar=True, type=click.IntRange(100),
              help="Messages kept per room log in the store (important ones are kept "
                   "beyond it for their retention).")
@click.option("--room-ttl", default=_D.room_ttl, show_default=True,
              envvar="LIVEROOM_ROOM_TTL", show_envvar=True, type=click.FloatRange(60),
              help="Seconds without a send or a read after which a room's log expires.")
@click.option("--normal-keep", default=_D.normal_keep, show_default=True,
              envvar="LIVEROOM_NORMAL_KEEP", show_envvar=True, type=click.IntRange(1),
              help="Newest normal messages each room's cache keeps.")
@click.option("--important-keep", default=_D.important_keep, show_default=True,
              envvar="LIVEROOM_IMPORTANT_KEEP", show_envvar=True, type=click.IntRange(1),
              help="Important messages kept at least (by count) per room.")
@click.option("--important-window", default=_D.important_window, show_default=True,
              envvar="LIVEROOM_IMPORTANT_WINDOW", show_envvar=True,
              type=click.FloatRange(0),
              help="Seconds for which important messages are kept at least.")
@click.option("--online-ttl", default=_D.online_ttl, show_default=True,
              envvar="LIVEROOM_ONLINE_TTL", show_envvar=True, type=click.FloatRange(1),
              help="Seconds without a poll after which a listener is offline; must exceed "
                   f"the longest poll timeout plus the longest hold interval "
                   f"({_D.poll_timeout_max + _D.hold_interval_max:g} s).")
@click.option("--vip-room", "vip_rooms", multiple=True, envvar="LIVEROOM_VIP_ROOMS",
              show_envvar=True,
              help="A room to serve as vip (repeat the flag; the variable takes a "
                   "space-separated list). Its online list is split over --vip-shards.")
@click.option("--vip-shards", default=_D.vip_shards, show_default=True,
              envvar="LIVEROOM_VIP_SHARDS", show_envvar=True, type=click.IntRange(1, 256),
              help="Shard keys a vip room's online list is split over, per statsvr node.")
@click.option("--viewers-threshold", default=_D.viewers_threshold, show_default=True,
              envvar="LIVEROOM_VIEWERS_THRESHOLD", show_envvar=True,
              type=click.IntRange(0),
              help="Distinct viewers of a room counted exactly; beyond, a HyperLogLog "
                   "estimates them (viewers_exact: false).")
def serve(host: str, port: int, store: str, admin_token: str | None,
          publisher_token: str | None, node_id: str, secret: str | None,
          log_level: str, log_cap: int, room_ttl: float, normal_keep: int,
          important_keep: int, important_window: float, online_ttl: float,
          vip_rooms: tuple[str, ...], vip_shards: int, viewers_threshold: int) -> None:
    """Run every role (proxy, recvsvr, statsvr) in this process."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for room in vip_rooms:
        try:
            check_name("room", room)
        except BadRequest as exc:
            raise click.BadParameter(f"{room!r}: {exc.message}", param_hint="--vip-room") from None
    try:
        settings = Settings(host=host, port=port, store=store, admin_token=admin_token,
                            publisher_token=publisher_token, node_id=node_id, secret=secret,
                            log_level=log_level, log_cap=log_cap, room_ttl=room_ttl,
                            normal_keep=normal_keep, important_keep=important_keep,
                            important_window=important_window, online_ttl=online_ttl,
                            vip_rooms=frozenset(vip_rooms), vip_shards=vip_shards,
                            viewers_threshold=viewers_threshold)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--online-ttl") from None
    # The node is ready once its lifecycle has started, but only listens after
    # run_app has started its sites: announce then (run_app's print hook).
    ready: list[Node] = []
    try:
        app = build_app(settings, announce=ready.append)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--store") from None
    loop = _new_loop()
    web.run_app(app, host=host, port=port, print=lambda *_: _announce(ready[0]),
                handler_cancellation=True, keepalive_timeout=15.0, shutdown_timeout=5.0,
                access_log=None, loop=loop)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


if __name__ == "__main__":  # pragma: no cover
    main()
