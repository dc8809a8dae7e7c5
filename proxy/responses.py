"""A :class:`~.reply.Reply` as aiohttp sends it: what every aiohttp route
of the proxy answers with (the front writes its replies itself)."""

from __future__ import annotations

from aiohttp import web

from liveroom.codec import wants_msgpack

from .reply import Reply, document_reply, error_reply


def response(reply: Reply) -> web.Response:
    """A reply as aiohttp sends it."""
    headers = {"Content-Type": reply.content_type}
    if reply.retry_after is not None:
        headers["Retry-After"] = str(reply.retry_after)
    return web.Response(body=reply.body, status=reply.status, headers=headers)


def document(request: web.Request, doc: dict[str, object], status: int = 200) -> web.Response:
    """A small document in the format the request asks for (JSON or msgpack)."""
    return response(document_reply(
        doc, use_msgpack=wants_msgpack(request.headers.get("Accept", "")), status=status))


def error_response(status: int, code: str, message: str,
                   retry_after: float | None = None) -> web.Response:
    return response(error_reply(status, code, message, retry_after))
