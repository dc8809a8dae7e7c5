"""The OpenAPI document (``proxy/openapi.json``) cannot drift from the server:
every route of the application is in it and everything in it is a route, its
limits are the server's, its error codes are the error hierarchy's, and
``GET /openapi.json`` serves it."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openapi_spec_validator
from support import BASE, running_node

from liveroom import errors
from liveroom.node import build_app
from liveroom.settings import Settings
from proxy.api.routes import OPENAPI
from proxy.params import MEMBERS_PAGE_MAX

PAGES = frozenset({"/", "/rooms/{room}", "/admin", "/openapi.json"})
"""Routes that are pages or documents, not the API: never in the document.
So is everything under ``/static/``."""

METHODS = frozenset({"get", "put", "post", "delete", "patch"})


def document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(OPENAPI.read_text())
    return doc


def is_page(path: str) -> bool:
    return path in PAGES or path.startswith("/static/")


def app_routes() -> set[tuple[str, str]]:
    """``(METHOD, path)`` of every route of a node's aiohttp application (the
    front serves polls, sends and likes too, but aiohttp has a route for each)."""
    app = build_app(BASE)
    routes = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        # aiohttp adds a HEAD route beside every GET.
        if route.method == "HEAD" or is_page(path):
            continue
        routes.add((route.method, path))
    return routes


def documented_routes() -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document()["paths"].items()
            for method in item if method in METHODS}


def test_every_route_is_documented() -> None:
    missing = app_routes() - documented_routes()
    # After a merge that adds routes (the admin dashboard's GET /v1/admin/rooms
    # and GET /v1/admin/nodes), this names them: add each to proxy/openapi.json
    # under "paths", with its parameters, answers and errors.
    assert not missing, f"routes missing from proxy/openapi.json: {sorted(missing)}"


def test_everything_documented_is_a_route() -> None:
    extra = documented_routes() - app_routes()
    assert not extra, f"proxy/openapi.json documents routes the server lacks: {sorted(extra)}"


def test_the_page_rule_keeps_the_api() -> None:
    assert not any(is_page(path) for _, path in documented_routes())
    assert ("GET", "/v1/rooms/{room}/poll") in app_routes()


def test_it_is_openapi_3_1_with_every_operation_answered() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1.")
    for path, item in doc["paths"].items():
        for method, op in item.items():
            responses = op["responses"]
            assert any(code.startswith("2") for code in responses), (method, path)
            assert op["operationId"], (method, path)
            for code, answer in responses.items():
                if code.startswith(("4", "5")):
                    ref = answer["$ref"].rsplit("/", 1)[-1]
                    shape = doc["components"]["responses"][ref]
                    assert shape["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/Error"}, (method, path, code)


def test_its_validator_accepts_it() -> None:
    openapi_spec_validator.validate(document())


def _param(path: str, name: str) -> dict[str, Any]:
    op = document()["paths"][path]["get"]
    for param in op["parameters"]:
        if param.get("name") == name:
            found: dict[str, Any] = param["schema"]
            return found
    raise AssertionError(f"{path} has no parameter {name}")


def test_its_limits_are_the_servers() -> None:
    s = Settings()
    poll = "/v1/rooms/{room}/poll"
    assert (_param(poll, "timeout")["maximum"], _param(poll, "timeout")["default"]) == (
        s.poll_timeout_max, s.poll_timeout)
    assert (_param(poll, "recent")["maximum"], _param(poll, "recent")["default"]) == (
        s.recent_max, s.recent_default)
    assert _param("/v1/rooms/{room}/online", "limit")["maximum"] == MEMBERS_PAGE_MAX
    assert f"at most {s.max_message_bytes // 1024} KiB" in json.dumps(
        document()["components"]["schemas"]["NewMessage"])


def test_every_error_code_is_listed() -> None:
    described = document()["components"]["schemas"]["Error"]["description"]
    codes = {cls.code for cls in vars(errors).values()
             if isinstance(cls, type) and issubclass(cls, errors.LiveroomError)}
    for code in codes | {"not_found", "method_not_allowed", "unhealthy", "uri_too_long",
                         "headers_too_large"}:
        assert f"`{code}`" in described, code


async def test_it_is_served(session: aiohttp.ClientSession) -> None:
    async with running_node() as node, session.get(f"{node.url}/openapi.json") as resp:
        assert resp.status == 200
        assert resp.content_type == "application/json"
        assert await resp.read() == OPENAPI.read_bytes()
