"""The options and arguments the commands share: the server they reach, the
tickets and tokens that say who speaks, and the room and uid names they take
(checked as the server checks them, before anything is sent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import BadRequest
from ..model import check_name
from ..settings import DEFAULTS, ENV_PREFIX, env_of

URL_ENV, TICKET_ENV, UID_ENV = (ENV_PREFIX + name for name in ("URL", "TICKET", "UID"))
"""The clients' own environment variables (``listen``, ``send``, the operators'
commands), beside those of the settings they share with the server
(:func:`~liveroom.settings.env_of`: ``--admin-token``, ``--token``)."""
DEFAULT_URL = "http://127.0.0.1:8080"
F = TypeVar("F", bound=Callable[..., Any])


def check_room(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name("room", value)
    except BadRequest as exc:
        raise click.BadParameter(f"{value!r}: {exc.message}") from None


def check_uid(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name("uid", value)
    except BadRequest as exc:
        raise click.BadParameter(f"{value!r}: {exc.message}") from None


def check_optional_uid(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else check_uid(ctx, param, value)


def url_option(command: F) -> F:
    return click.option(
        "--url", default=DEFAULT_URL, show_default=True, envvar=URL_ENV,
        show_envvar=True, help="A running liveroom server (any node).")(command)


def ticket_option(command: F) -> F:
    return click.option(
        "--ticket", envvar=TICKET_ENV, show_envvar=True,
        help="A ticket your backend signed (servers run with --auth ticket): it names "
             "the uid; see `liveroom ticket`. Given as a flag, it wins over the "
             f"environment's {UID_ENV} (and, for send and gift, "
             f"{env_of('publisher_token')}).")(command)


def operators_options(command: F) -> F:
    """The options every operators' command takes: where to send the change."""
    command = click.option(
        "--store", "store", default=None, metavar="URL",
        help="Change the store directly (redis://HOST:PORT/DB) instead of going "
             "through a running server, with the default settings (an ended "
             "broadcast's history kept --history-ttl's default, "
             f"{DEFAULTS.history_ttl / 86_400:g} days, whatever the servers run "
             "with); not with the embedded memory store, which lives inside the "
             "server.")(command)
    command = click.option(
        "--admin-token", envvar=env_of("admin_token"), show_envvar=True,
        help="The server's admin token (not needed with --store).")(command)
    command = click.option(
        "--url", default=DEFAULT_URL, show_default=True, envvar=URL_ENV,
        show_envvar=True, help="A running liveroom server (any node over the store).")(command)
    return command
