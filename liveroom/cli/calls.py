"""A command's call: through the Python client to a running server or, for an
operators' command given --store, to the store itself; its failure said as the
command's one line."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from ..clock import SystemClock
from ..errors import LiveroomError
from ..settings import DEFAULTS, env_of, is_shared

if TYPE_CHECKING:
    from ..client import Client, ClientError
    from ..events import Events
    from ..store.base import Store

T = TypeVar("T")


def clear(exc: ClientError, token_hint: str | None = None) -> click.ClickException:
    """A client error as the command's one-line failure (exit status 1)."""
    from ..client import ApiError

    if isinstance(exc, ApiError):
        message = exc.message or exc.code
        if exc.status == 401 and token_hint:
            message += f" ({token_hint})"
        return click.ClickException(f"{message} (HTTP {exc.status})")
    return click.ClickException(str(exc))


async def store_events(store: Store) -> Events:
    """The events of an action taken in the store itself (``--store``): kept
    with the action, as a node keeps them, when a node delivers this store's
    webhooks; that node's sweep moves them to the outbox (within a minute: a
    one-shot command moves nothing). None when no node delivers them."""
    from ..events import NO_EVENTS, Events

    return Events(store.outbox, SystemClock()) if await store.outbox.delivered() else NO_EVENTS


def operate(url: str, admin_token: str | None, store: str | None,
            via_server: Callable[[Client], Awaitable[T]],
            via_store: Callable[[Store], Awaitable[T]]) -> T:
    """Run one operators' call against the server at ``url``, or the store."""
    from ..client import Client, ClientError
    from ..store import open_store

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
                    raise clear(exc, None if admin_token else
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
