"""How the redis engine calls Redis: its Lua scripts, driver errors as one error,
replies as values.

Every module of the redis engine runs its scripts and wraps its commands
through here, so they all map failures the same way:

- :func:`unavailable` turns whatever the driver raises into
  :class:`~liveroom.errors.StoreUnavailable`; a refusal that is not "not ready
  now" (a script's error, a wrong type) becomes its
  :class:`~liveroom.errors.StoreRefused`, logged: a bug, not an outage.
- :class:`Lua` and :func:`run_scripts` send scripts of ``lua/`` as ``EVALSHA``,
  a batch in one pipeline, loading a script only when the server says it does
  not know it; :class:`Batched` sends the calls concurrent callers ask for in
  one turn of the loop (the appends of concurrent sends) as one batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Any

import redis
from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster

from ...errors import StoreRefused, StoreUnavailable

logger = logging.getLogger("liveroom.store.redis")

# Server errors meaning "not ready now" rather than "this command is wrong":
# redis-py maps some codes to classes (and strips the code), not the others.
_NOT_READY = (rexc.ReadOnlyError, rexc.OutOfMemoryError, rexc.ClusterDownError,
              rexc.TryAgainError)
_NOT_READY_CODES = ("BUSY ", "NOREPLICAS ")

Client = Redis | RedisCluster
"""A client of one Redis or of a Redis Cluster: the engine speaks to both alike
(every script and pipeline touches one room's slot; a cluster pipeline sends
one batch per cluster node, in parallel)."""


def script_text(name: str) -> str:
    """The text of ``lua/<name>``."""
    return resources.files("liveroom.store.redis").joinpath("lua", name).read_text("utf-8")


@contextlib.contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Turn whatever the driver raises into StoreUnavailable (StoreRefused for
    a command Redis refused); ``what`` says in words what the node was doing
    ("storing a message"), as operators and clients read it."""
    try:
        yield
    except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
        # BusyLoadingError is a ConnectionError.
        raise StoreUnavailable(f"redis unavailable while {what}: {exc}") from exc
    except (rexc.RedisClusterException, rexc.ClusterError) as exc:
        # A cluster between layouts (a slot not covered during a failover, no
        # node reachable, redirections exhausted): an outage, not a bug. Not a
        # RedisError, the first of them.
        raise StoreUnavailable(f"redis cluster unavailable while {what}: {exc}") from exc
    except rexc.ResponseError as exc:
        if isinstance(exc, _NOT_READY) or str(exc).startswith(_NOT_READY_CODES):
            raise StoreUnavailable(f"redis not ready while {what}: {exc}") from exc
        logger.error("redis refused a command while %s: %s", what, exc)
        raise StoreRefused(f"redis refused a command while {what}: {exc}") from exc
    except rexc.RedisError as exc:
        logger.error("redis failed while %s: %r", what, exc)
        raise StoreUnavailable(f"redis failed while {what}: {exc}") from exc
    except AttributeError as exc:
        if not _raised_in_driver(exc):
            raise  # ours: a bug, answered 500
        # redis-py's asyncio connection, dropped by another task while it
        # connected (a cluster's failover), writes on a writer it no longer
        # has: a lost connection, not a bug of the caller's (CI met it in
        # tests/store/test_cluster.py, answered 500).
        raise StoreUnavailable(f"redis connection lost while {what}: {exc!r}") from exc


_DRIVER = os.path.dirname(redis.__file__) + os.sep


def _raised_in_driver(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in redis-py's own code."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(_DRIVER)


def text(value: Any) -> str:
    """A reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def blob(value: bytes | str | None) -> bytes | None:
    """A reply as bytes: the client never decodes, but its types allow ``str``."""
    return value.encode() if isinstance(value, str) else value


class Lua:
    """A script of ``lua/`` run by ``EVALSHA``, batched in one plain pipeline.

    redis-py's own scripts cost a ``SCRIPT EXISTS`` round trip every time a
    pipeline holding them runs; this sends ``EVALSHA`` straight away and loads
    the script only after a ``NOSCRIPT`` reply (a fresh or flushed server), then
    runs again just the calls refused, which did nothing.

    ``uses`` names scripts of shared rules (``local function`` definitions)
    sent in front of this one, so a rule several scripts apply is written once.
    """

    def __init__(self, name: str, *, uses: Sequence[str] = ()) -> None:
        self.name = name
        self.text = "".join([*map(script_text, uses), script_text(name)])
        self.sha = hashlib.sha1(self.text.encode()).hexdigest()


Call = tuple[Lua, Sequence[str], Sequence[Any]]
"""One script call: the script, its KEYS and its ARGV."""


async def run_scripts(client: Client, calls: Sequence[Call]) -> list[Any]:
    """Run script calls in one pipeline (two when a script had to be loaded).

    Raises the driver's error of the first call that failed otherwise; calls of
    the batch before and after it may have run.
    """
    replies = await run_each(client, calls)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


async def run_each(client: Client, calls: Sequence[Call]) -> list[Any]:
    """Run script calls in one pipeline (two when a script had to be loaded):
    each call's reply, or the error Redis answered it (a script's error, a
    refusal) in its place. What fails them all (the connection) raises."""
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    for attempt in range(2):
        async with client.pipeline(transaction=False) as pipe:
            for i in todo:
                lua, call_keys, args = calls[i]
                # EVALSHA by name: a cluster pipeline blocks its evalsha()
                # method, not the command (which routes by its first key).
                pipe.execute_command("EVALSHA", lua.sha, len(call_keys), *call_keys, *args)
            answers = await pipe.execute(raise_on_error=False)
        refused = []
        for i, answer in zip(todo, answers, strict=True):
            if isinstance(answer, rexc.NoScriptError) and attempt == 0:
                refused.append(i)
            else:
                replies[i] = answer
        if not refused:
            break
        for lua in {calls[i][0] for i in refused}:
            await client.script_load(lua.text)
        todo = refused
    return replies


class Batched:
    """Script calls made in one turn of the loop, sent to Redis together.

    Concurrent senders each ask for one call (an append); the calls asked in
    the same turn go out in one pipeline on the next (one write, one read,
    one pool checkout and timeout for them all, instead of one each), and
    each caller gets its own reply, or raises its own error, or the error
    that failed the batch. Calls of one batch run in the order asked; a
    caller that is cancelled while its batch is in flight may still have its
    call run (as a call of its own could). :meth:`close` waits for the batches
    in flight.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._asked: list[tuple[Call, asyncio.Future[Any]]] = []
        self._in_flight: set[asyncio.Task[None]] = set()

    async def run(self, call: Call) -> Any:
        """``call``'s reply (it raises what Redis answered it, as
        :func:`run_scripts` would)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._asked:
            loop.call_soon(self._send)
        self._asked.append((call, future))
        return await future

    def _send(self) -> None:
        batch, self._asked = self._asked, []
        task = asyncio.create_task(self._run(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _run(self, batch: list[tuple[Call, asyncio.Future[Any]]]) -> None:
        try:
            replies = await run_each(self._client, [call for call, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue  # its caller was cancelled
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def close(self) -> None:
        """Wait for the batches in flight (their callers get their answers)."""
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)


async def run_durable(client: Client, call: Call, replicas: int,
                      timeout_ms: int) -> tuple[Any, int]:
    """Run one script call and ``WAIT replicas timeout_ms`` right behind it on
    the same connection; return its reply and how many replicas acknowledged
    every write of that connection so far (the call's included).

    On a cluster the ``WAIT`` goes to the node the call's first key routes to
    (a pipeline sends one batch per node, on one connection). When the call
    was redirected meanwhile (a slot moved), the ``WAIT`` counted on the old
    node: the call then reports 0 replicas, so the caller never claims a
    durability it did not see.
    """
    lua, call_keys, args = call
    for attempt in range(2):
        node = client.get_node_from_key(call_keys[0]) \
            if isinstance(client, RedisCluster) else None
        async with client.pipeline(transaction=False) as pipe:
            # EVALSHA by name: a cluster pipeline blocks its evalsha() method, not
            # the command (which routes by its first key).
            pipe.execute_command("EVALSHA", lua.sha, len(call_keys), *call_keys, *args)
            if node is not None:
                pipe.execute_command("WAIT", replicas, timeout_ms, target_nodes=node)
            else:
                pipe.execute_command("WAIT", replicas, timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
        if isinstance(reply, rexc.NoScriptError) and attempt == 0:
            await client.script_load(lua.text)
            continue
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            # The call ran; only its durability is unknown: the node the WAIT
            # went to stopped being the master meanwhile (a failover answers
            # "WAIT cannot be used with replica instances" or "UNBLOCKED").
            logger.info("WAIT after %s failed: %s", lua.name, acked)
            return reply, 0
        if isinstance(client, RedisCluster) and node is not None:
            now = client.get_node_from_key(call_keys[0])
            if now is None or now.name != node.name:
                return reply, 0
        return reply, int(acked)
    raise AssertionError("unreachable: the second attempt returns or raises")
