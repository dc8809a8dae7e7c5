"""The vendored chart library (uPlot, for the dashboard) is served from the
repository under ``/static/vendor/uplot/``, never from a CDN, with its license
kept beside it; nothing else of the vendor folder is reachable."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from support import Running, running_node

from proxy.api.pages import STATIC

UPLOT = STATIC / "vendor" / "uplot"


@pytest.fixture
async def node() -> AsyncIterator[Running]:
    async with running_node() as running:
        yield running


@pytest.mark.parametrize(("name", "content_type"), [
    ("uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    ("uPlot.min.css", "text/css; charset=utf-8"),
])
async def test_uplot_is_served_from_the_repository(node: Running, session: aiohttp.ClientSession,
                                                   name: str, content_type: str) -> None:
    async with session.get(f"{node.url}/static/vendor/uplot/{name}") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == content_type
        assert resp.headers["Cache-Control"] == "no-cache"
        assert await resp.read() == (UPLOT / name).read_bytes()


@pytest.mark.parametrize("path", [
    "/static/vendor/uplot/LICENSE", "/static/vendor/uplot/README.md",
    "/static/vendor/uplot/nothing.js", "/static/vendor/nolib/uPlot.min.css",
    "/static/vendor/uplot/..%2f..%2fadmin.js", "/static/vendor/uplot/", "/static/vendor/uplot",
    "/static/vendor/uplot/x/uPlot.min.css",
])
async def test_nothing_else_of_the_vendor_folder(node: Running, session: aiohttp.ClientSession,
                                                 path: str) -> None:
    async with session.get(aiohttp.client.URL(node.url + path, encoded=True)) as resp:
        assert resp.status == 404, path
        assert (await resp.json())["error"] == "not_found"


def test_the_license_and_the_version_are_kept_beside_it() -> None:
    assert (UPLOT / "LICENSE").read_text().startswith("The MIT License (MIT)")
    banner = (UPLOT / "uPlot.iife.min.js").read_text()[:80]
    version = re.search(r"\(v(\d+\.\d+\.\d+)\)", banner)
    assert version is not None
    assert f"uPlot {version[1]}, vendored" in (UPLOT / "README.md").read_text()


def test_the_pages_load_no_script_from_elsewhere() -> None:
    for page in ("admin.html", "index.html", "room.html"):
        text = (STATIC / page).read_text()
        for ref in re.findall(r'(?:src|href)="([^"]+)"', text):
            assert not re.match(r"(https?:)?//", ref), (page, ref)
