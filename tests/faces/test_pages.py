"""The pages and static files (proxy/api/pages.py) over real sockets: the files
of ``proxy/static/`` only, with their types and caching headers, through the
front's hand-over to aiohttp; anything else a JSON error."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from browser import Served, screenshot
from multidict import CIMultiDict
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait
from support import Running, read_response, running_node, serve

from proxy.api.pages import STATIC, load_static

TYPES = {"liveroom.js": "text/javascript; charset=utf-8",
         "room.html": "text/html; charset=utf-8",
         "room.css": "text/css; charset=utf-8",
         "admin.html": "text/html; charset=utf-8"}


@pytest.fixture
async def node() -> AsyncIterator[Running]:
    async with running_node() as running:
        yield running


async def get(session: aiohttp.ClientSession, url: str,
              **headers: str) -> tuple[int, CIMultiDict[str], bytes]:
    headers.setdefault("Accept-Encoding", "identity")
    async with session.get(url, headers=headers, auto_decompress=False) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.read()


@pytest.mark.parametrize("name", sorted(TYPES))
async def test_static_files_are_served_with_type_and_validator(
        node: Running, session: aiohttp.ClientSession, name: str) -> None:
    status, headers, body = await get(session, f"{node.url}/static/{name}")
    assert status == 200
    assert headers["Content-Type"] == TYPES[name]
    assert body == (STATIC / name).read_bytes()
    assert headers["Cache-Control"] == "no-cache"
    assert headers["X-Content-Type-Options"] == "nosniff"
    # Revalidation: the same ETag answers 304 without a body.
    status, again, body = await get(session, f"{node.url}/static/{name}",
                                    **{"If-None-Match": headers["ETag"]})
    assert (status, body, again["ETag"]) == (304, b"", headers["ETag"])


async def test_gzip_is_sent_to_clients_that_accept_it(
        node: Running, session: aiohttp.ClientSession) -> None:
    status, headers, body = await get(session, f"{node.url}/static/liveroom.js",
                                      **{"Accept-Encoding": "gzip"})
    assert (status, headers["Content-Encoding"]) == (200, "gzip")
    assert gzip.decompress(body) == (STATIC / "liveroom.js").read_bytes()
    assert headers["Vary"] == "Accept-Encoding"


@pytest.mark.parametrize(("path", "page"), [("/", "index.html"), ("/rooms/demo", "room.html"),
                                            ("/rooms/a.b-c_9", "room.html"),
                                            ("/admin", "admin.html")])
async def test_pages(node: Running, session: aiohttp.ClientSession, path: str,
                     page: str) -> None:
    status, headers, body = await get(session, node.url + path)
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert body == (STATIC / page).read_bytes()
    if page != "admin.html":
        assert "script-src 'self'" in headers["Content-Security-Policy"]


@pytest.mark.parametrize("path", [
    "/static/nothing.js", "/static/", "/static/.hidden", "/static/../pages.py",
    "/static/..%2fpages.py", "/static/%2e%2e%2fpages.py", "/static/..%5cpages.py",
    "/static/%2e%2e/%2e%2e/liveroom/node.py", "/static//etc/passwd",
    "/static/liveroom.js/", "/static/room.html%00", "/rooms/", "/rooms/demo/extra",
])
async def test_anything_else_is_a_json_404(node: Running, session: aiohttp.ClientSession,
                                           path: str) -> None:
    # Sent as written: the client must not normalise the dots away.
    async with session.get(aiohttp.client.URL(node.url + path, encoded=True)) as resp:
        assert resp.status == 404, path
        assert resp.content_type == "application/json"
        doc = await resp.json()
    assert doc["error"] == "not_found"
    assert set(doc) == {"error", "message"}
    assert doc["message"] != "404: Not Found"


async def test_an_unknown_route_and_a_wrong_method_say_what_was_asked(
        node: Running, session: aiohttp.ClientSession) -> None:
    async with session.get(node.url + "/v1/room/demo/poll") as resp:
        assert resp.status == 404
        assert (await resp.json())["message"] == (
            "no such route: GET /v1/room/demo/poll (the API is at /openapi.json)")
    async with session.delete(node.url + "/v1/rooms/demo/stats") as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "GET,HEAD"
        assert await resp.json() == {
            "error": "method_not_allowed",
            "message": "DELETE is not allowed on /v1/rooms/demo/stats: use GET, HEAD"}


async def test_dot_segments_never_leave_the_folder(node: Running) -> None:
    """Raw requests, so no client resolves ``..`` first."""
    host, port = node.url.removeprefix("http://").split(":")
    for path in ("/static/../pages.py", "/static/../../pyproject.toml",
                 "/static/./../__init__.py"):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            status, _, body = await read_response(reader)
        finally:
            writer.close()
            await writer.wait_closed()
        # aiohttp resolves the dots (to /pages.py, /pyproject.toml): no route.
        assert status == 404, (path, body)
        assert json.loads(body)["error"] == "not_found"


@pytest.mark.parametrize("room", ["bad%20name", "a" * 65, "%C3%A9t%C3%A9", "x%2Fy"])
async def test_a_bad_room_name_is_a_400(node: Running, session: aiohttp.ClientSession,
                                        room: str) -> None:
    async with session.get(aiohttp.client.URL(f"{node.url}/rooms/{room}",
                                              encoded=True)) as resp:
        assert resp.status == 400, room
        doc = await resp.json()
    assert doc["error"] == "bad_request"
    assert "room must match" in doc["message"]


async def test_pages_are_served_on_the_front_connection_after_a_poll(node: Running) -> None:
    """A keep-alive connection the front served a poll on hands over ``GET /``."""
    host, port = node.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /v1/rooms/front/poll?uid=u HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, _ = await read_response(reader)
        assert (status, headers["server"]) == (200, "liveroom")
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert status == 200
        assert body == (STATIC / "index.html").read_bytes()
    finally:
        writer.close()
        await writer.wait_closed()


def test_only_known_types_and_no_dot_files_are_loaded(tmp_path: Path) -> None:
    (tmp_path / "a.js").write_text("export {}")
    (tmp_path / ".secret.js").write_text("no")
    (tmp_path / "notes.py").write_text("no")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.js").write_text("no")
    assert sorted(load_static(tmp_path)) == ["a.js"]


def test_the_index_page_loads_in_a_browser(browser: WebDriver, served: Served,
                                           tmp_path: Path) -> None:
    browser.get(served.url + "/")
    WebDriverWait(browser, 10).until(seen.presence_of_element_located((By.ID, "room")))
    screenshot(browser, tmp_path, "index")
    field = browser.find_element(By.ID, "room")
    field.clear()
    field.send_keys("lobby")
    browser.find_element(By.CSS_SELECTOR, "#pick button").click()
    WebDriverWait(browser, 10).until(seen.url_to_be(served.url + "/rooms/lobby"))


async def test_liveroom_serve_serves_the_pages(session: aiohttp.ClientSession) -> None:
    """The real process: its first request on a connection is a page (the
    front hands it to aiohttp), the next a poll on the same connection."""
    with serve() as (url, _):
        status, headers, body = await get(session, url + "/")
        assert (status, body) == (200, (STATIC / "index.html").read_bytes())
        status, headers, body = await get(session, url + "/static/liveroom.js")
        assert (status, headers["Content-Type"]) == (200, "text/javascript; charset=utf-8")
        async with session.get(f"{url}/v1/rooms/lobby/poll?uid=u") as resp:
            assert resp.status == 200
            assert (await resp.json())["room"] == "lobby"
