"""Browser tests' tools: headless Chromium driven by selenium, and a node
served from a thread of its own.

Selenium's calls block, so the node a browser test talks to cannot run on the
test's event loop: :func:`served_node` runs it (memory engine by default, the
real front and aiohttp behind it, on a free loopback port) on a loop in a
background thread, and the test talks to it over real sockets like the
browser does.

The browser is Debian's ``chromium`` with its ``chromedriver`` (installed by
``scripts/install-test-deps``; nothing is downloaded at run time: selenium is
given both paths, so Selenium Manager never runs). One browser serves the
whole session, with a fresh profile; a test opens what it needs in it. The
flags that stop Chromium's background networking matter on a closed network:
without them its own connections are refused and slow everything down.
Every browser test saves screenshots with :func:`screenshot` under its
``tmp_path``.

The fixtures ``browser`` and ``served`` are imported by ``conftest.py``, so any
test module can ask for them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from support import PUBLISHER, running_node

from liveroom.node import Node, new_loop

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

T = TypeVar("T")

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1100,900",
)


def find_browser() -> tuple[str, str]:
    """The paths of Chromium and its chromedriver, or the test fails saying how
    to install them (the browser tests must run in CI, so they never skip)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail("chromium and chromedriver are not on PATH: run scripts/install-test-deps")
    return chromium, driver


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile, quit (and its profile
    removed) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = find_browser()
    with tempfile.TemporaryDirectory(prefix="liveroom-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            driver.set_page_load_timeout(20)
            driver.set_script_timeout(20)
            yield driver
        finally:
            driver.quit()


@pytest.fixture(scope="session")
def browser() -> Iterator[WebDriver]:
    """The session's headless Chromium. A test leaves it where it likes: the
    next one opens its own address."""
    with chromium() as driver:
        yield driver


def screenshot(driver: WebDriver, folder: Path, name: str) -> Path:
    """Save what the browser shows as ``folder/name.png``."""
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


@contextmanager
def window(driver: WebDriver, width: int, height: int) -> Iterator[None]:
    """The browser's window at ``width`` x ``height`` (a phone, for a
    screenshot), back to the session's size on exit."""
    before = driver.get_window_size()
    driver.set_window_size(width, height)
    try:
        yield
    finally:
        driver.set_window_size(before["width"], before["height"])


@dataclass
class Served:
    """A node serving on a loop in a background thread."""

    url: str
    node: Node
    loop: asyncio.AbstractEventLoop

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``work`` on the node's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)


@contextmanager
def served_node(store: str = "memory", **overrides: Any) -> Iterator[Served]:
    """:func:`support.running_node` on a loop of its own in a thread, stopped
    (gracefully, held polls answered) on exit."""
    loop = new_loop()
    started: concurrent.futures.Future[Served] = concurrent.futures.Future()
    stop: list[asyncio.Event] = []

    async def serve() -> None:
        stop.append(asyncio.Event())
        try:
            async with running_node(store, **overrides) as running:
                started.set_result(Served(running.url, running.node, loop))
                await stop[0].wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),),
                              name="served-node", daemon=True)
    thread.start()
    try:
        served = started.result(timeout=30)
        yield served
    finally:
        if stop:
            loop.call_soon_threadsafe(stop[0].set)
        thread.join(timeout=30)
        if not thread.is_alive():
            loop.close()


@pytest.fixture
def served() -> Iterator[Served]:
    """A node on the memory engine with the test settings of :mod:`support`."""
    with served_node() as node:
        yield node


def call(url: str, method: str = "GET", doc: Any = None,
         token: str | None = None) -> tuple[int, Any]:
    """One HTTP request from the test's thread: ``(status, JSON answer)``."""
    headers = {"Content-Type": "application/json"} if doc is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(doc).encode() if doc is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as failed:
        with failed:
            return failed.code, json.loads(failed.read() or b"null")


def send_message(served: Served, room: str, body: Any, *, uid: str = "sender",
                 important: bool = False, to: str | None = None) -> dict[str, Any]:
    """Send through the API (important and personal ones, ``to``, with the
    publisher token); 201 or fail."""
    doc: dict[str, Any] = {"uid": uid, "body": body, "important": important or bool(to)}
    if to is not None:
        doc["to"] = to
    status, answer = call(f"{served.url}/v1/rooms/{room}/messages", "POST", doc,
                          token=PUBLISHER if important or to else None)
    assert status == 201, answer
    sent: dict[str, Any] = answer
    return sent
