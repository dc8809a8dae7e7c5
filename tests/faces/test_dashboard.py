"""The operators' dashboard (/admin) in headless Chromium, against a node over
real sockets: it lists the rooms that have listeners, draws a room's online
curve, toggles vip through the admin API, ends a broadcast after a
confirmation, moderates a room (recalls, held messages approved or denied
after a confirmation, mutes, bans, slow mode, the audit), keeps the word
filter's lists, and says so when the token is wrong. Waits are on the page's
DOM (WebDriverWait), never sleeps; each test saves screenshots under its
``tmp_path``.

The node runs on a fake clock started an hour and half a minute in the past: the
test moves it on (``Populated.live``), beating heartbeats into the statsvr
table at every step, so the real sampler, merge and announcements produce an
hour of online series in a few seconds, ending at the browser's now.

``LIVEROOM_SCREENSHOT_DIR`` set (``scripts/screenshots`` sets it to ``docs/``):
the screenshot in docs/ of the dashboard is written there as ``dashboard.png``.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from browser import Served, call, screenshot, send_message, served_node, window
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait
from support import ADMIN, PUBLISHER, Listener, free_port

from liveroom.clock import FakeClock
from liveroom.model import NewMessage

ROOMS = {"finals": 1500, "cooking": 240, "lobby": 35, "chess": 12}
"""Rooms and their listeners at their peak in the simulated hour (the
finals' at its end: a tier of its own)."""

SERIES_STROKE = (43, 108, 212)
"""The average's line colour in admin.js (#2b6cd4)."""


@dataclass
class Populated:
    served: Served
    clock: FakeClock
    lived: float = 0.0
    """Fake seconds lived so far (the swing's phase)."""

    def live(self, minutes: float, step: float = 10.0) -> None:
        """Move the fake clock ``minutes`` on in ``step`` s, every room's
        listeners beating at each step (their number swinging over the hour)
        and reading the room through this node, as their polls would."""
        steps = int(minutes * 60 / step)
        node = self.served.node

        async def work() -> None:
            for _ in range(steps):
                self.lived += step
                t = min(1.0, self.lived / 3630)
                for room, peak in ROOMS.items():
                    # The finals fill up towards kick-off; the others come and go.
                    share = 0.25 + 0.7 * t ** 1.5 + 0.05 * math.sin(40 * t) \
                        if room == "finals" else 0.6 + 0.4 * math.sin(4 * t + len(room))
                    count = max(1, round(peak * share))
                    node.statsvr.tables.beat(room, [f"{room}-u{j}" for j in range(count)])
                    node.recvsvr.current(room)  # their polls read the room here
                await self.clock.advance(step)
                for _ in range(5):  # flush, shard writes, merge, samples: memory only
                    await asyncio.sleep(0)
        self.served.run(work(), timeout=120)


class HeldPolls:
    """Long polls held by a node, from a client session on the node's loop."""

    def __init__(self, session: aiohttp.ClientSession, polls: list[asyncio.Future[Any]]) -> None:
        self.session = session
        self.polls = polls

    async def stop(self) -> None:
        for poll in self.polls:
            poll.cancel()
        await asyncio.gather(*self.polls, return_exceptions=True)
        await self.session.close()


async def hold_polls(served: Served, room: str, uids: list[str]) -> HeldPolls:
    """A first poll for each of ``uids``, then a second one the node holds."""
    session = aiohttp.ClientSession()
    polls = []
    for uid in uids:
        listener = Listener(session, room, uid=uid)
        await listener.poll(served.url)
        polls.append(asyncio.ensure_future(listener.poll(served.url, timeout=60)))
    async with asyncio.timeout(10):
        while served.node.proxy.held_polls() < len(uids):
            await asyncio.sleep(0.01)
    return HeldPolls(session, polls)


@pytest.fixture
def populated() -> Iterator[Populated]:
    """A node on a fake clock, rooms open with messages, an hour of listeners."""
    clock = FakeClock(start=time.time() - 3630)
    with served_node(clock=clock) as served:
        for room in ROOMS:
            served.run(served.node.store.log.open_room(room))
            # A first poll: this node caches the room (its messages a minute).
            status, _ = call(f"{served.url}/v1/rooms/{room}/poll?uid=watcher")
            assert status == 200
        world = Populated(served, clock)
        world.live(60)
        for i in range(12):
            send_message(served, "finals", {"text": f"goal {i}"}, uid=f"fan{i}")
        send_message(served, "cooking", "more salt", uid="chef")
        world.live(0.5, step=5)
        yield world


def open_dashboard(browser: WebDriver, served: Served, token: str = ADMIN) -> None:
    """Open /admin in a fresh tab state and give it ``token``."""
    browser.get(f"{served.url}/admin")
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{served.url}/admin")
    field = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "token"))
    WebDriverWait(browser, 10).until(lambda b: field.is_displayed())
    field.send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()


def room_rows(browser: WebDriver) -> list[str]:
    return [str(r.get_attribute("data-room"))
            for r in browser.find_elements(By.CSS_SELECTOR, "#rooms tbody tr")]


def row_cells(browser: WebDriver, room: str) -> list[str]:
    row = browser.find_element(By.CSS_SELECTOR, f'#rooms tbody tr[data-room="{room}"]')
    return [str(td.text) for td in row.find_elements(By.TAG_NAME, "td")]


def stroke_pixels(browser: WebDriver) -> int:
    """Pixels of the plot's canvas in the average's colour (0 without a canvas)."""
    count: int = browser.execute_script("""
        const canvas = document.querySelector('#chart canvas');
        if (!canvas || !canvas.width || !canvas.height) return 0;
        const [r, g, b] = arguments[0];
        const data = canvas.getContext('2d')
            .getImageData(0, 0, canvas.width, canvas.height).data;
        let n = 0;
        for (let i = 0; i < data.length; i += 4) {
            if (Math.abs(data[i] - r) < 12 && Math.abs(data[i + 1] - g) < 12
                && Math.abs(data[i + 2] - b) < 12 && data[i + 3] > 200) n++;
        }
        return n;
    """, list(SERIES_STROKE))
    return count


def test_the_dashboard_lists_rooms_with_listeners_and_draws_a_curve(
        browser: WebDriver, populated: Populated, tmp_path: Path) -> None:
    served = populated.served
    open_dashboard(browser, served)
    WebDriverWait(browser, 15).until(lambda b: room_rows(b) == list(ROOMS))
    finals = row_cells(browser, "finals")
    assert finals[0] == "finals"
    assert 1 <= int(finals[1].replace(",", "")) <= ROOMS["finals"]
    assert finals[2] == ("1 s" if int(finals[1].replace(",", "")) >= 1000 else "plain")
    assert finals[4] == "12"
    assert row_cells(browser, "chess")[4] == "0"
    nodes = browser.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")
    assert [n.get_attribute("data-node") for n in nodes] == [served.node.settings.name]
    screenshot(browser, tmp_path, "rooms")

    browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="finals"]').click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "room-name").text == "finals")
    WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 200)
    assert not browser.find_element(By.ID, "chart-empty").is_displayed()
    # The hour shows about 60 one-minute points; the day the same hour, coarser.
    screenshot(browser, tmp_path, "hour")
    browser.find_element(By.CSS_SELECTOR, '#ranges button[data-range="86400"]').click()
    WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 50)
    browser.find_element(By.CSS_SELECTOR, '#ranges button[data-range="7776000"]').click()
    WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 0)
    screenshot(browser, tmp_path, "90-days")
    # The canvas holds a picture, not a blank: its PNG is far from an empty one's.
    data_url: str = browser.execute_script(
        "return document.querySelector('#chart canvas').toDataURL()")
    assert len(data_url) > 5000


def time_ticks(browser: WebDriver, seconds: int) -> list[str]:
    """The time axis's labels once the curve of the last ``seconds`` is drawn
    (choosing a range drops the plot, and its labels with it)."""
    browser.find_element(By.CSS_SELECTOR, f'#ranges button[data-range="{seconds}"]').click()
    ticks = WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "chart").get_attribute("data-ticks"))
    return str(ticks).split()


def test_a_rooms_first_minute_has_distinct_time_ticks(browser: WebDriver,
                                                     tmp_path: Path) -> None:
    """A room sampled once so far, one point on its curve: the time axis
    still spans the range asked for, every tick with a label of its own."""
    # Half a minute from the start of this one: its samples fall in one bucket.
    clock = FakeClock(start=time.time() // 60 * 60)
    with served_node(clock=clock) as served:
        node = served.node

        async def first_half_minute() -> None:
            await node.store.log.open_room("fresh")
            for _ in range(3):
                node.statsvr.tables.beat("fresh", [f"fresh-u{j}" for j in range(5)])
                node.recvsvr.current("fresh")
                await clock.advance(10)
                for _ in range(5):  # flush, shard writes, merge, samples: memory only
                    await asyncio.sleep(0)

        served.run(first_half_minute())
        status, series = call(f"{served.url}/v1/rooms/fresh/stats/online", token=ADMIN)
        assert (status, len(series["points"])) == (200, 1)
        open_dashboard(browser, served)
        WebDriverWait(browser, 15).until(lambda b: "fresh" in room_rows(b))
        browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="fresh"]').click()
        WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 0)
        screenshot(browser, tmp_path, "first-minute")
        # A day's ticks are hours apart (the two ends may read the same hour
        # when the range starts on a tick); an hour's, minutes apart.
        assert len(set(time_ticks(browser, 86400))) >= 3
        labels = time_ticks(browser, 3600)
        assert len(labels) >= 3, labels
        assert len(set(labels)) == len(labels), labels


def clipped(browser: WebDriver, table: str) -> dict[str, float]:
    """How wide the table is, how wide its card lets it be, and the page's width."""
    sizes: dict[str, float] = browser.execute_script("""
        const table = document.getElementById(arguments[0]);
        return {table: table.scrollWidth, room: table.parentElement.clientWidth,
                right: table.getBoundingClientRect().right,
                page: document.documentElement.clientWidth};
    """, table)
    return sizes


def test_the_live_nodes_fit_a_1100_px_window(browser: WebDriver, tmp_path: Path) -> None:
    """A node with a long name: its row is not cut at 1 100 px, with a room
    chosen or without one (then no half of the page stays empty)."""
    with served_node(node_id="liveroom-eu-west-1a-node-07.internal:8080") as served, \
            window(browser, 1100, 900):
        call(f"{served.url}/v1/rooms/quiet/poll?uid=watcher")
        open_dashboard(browser, served)
        WebDriverWait(browser, 10).until(
            lambda b: b.find_elements(By.CSS_SELECTOR, "#nodes tbody tr"))
        screenshot(browser, tmp_path, "no-room")
        sizes = clipped(browser, "nodes")
        assert sizes["table"] <= sizes["room"], sizes
        assert sizes["right"] <= sizes["page"], sizes
        rooms = browser.find_element(By.ID, "rooms-card").rect
        assert rooms["width"] > sizes["page"] * 0.9  # the whole width, not its left half

        browser.find_element(By.ID, "pick-room").send_keys("quiet\n")
        WebDriverWait(browser, 10).until(
            lambda b: b.find_element(By.ID, "room-sect").text == "auto")
        screenshot(browser, tmp_path, "room")
        sizes = clipped(browser, "nodes")
        assert sizes["table"] <= sizes["room"], sizes
        assert sizes["right"] <= sizes["page"], sizes
        # The room's panel beside the rooms, the nodes under both.
        rooms = browser.find_element(By.ID, "rooms-card").rect
        room = browser.find_element(By.ID, "room").rect
        assert room["x"] >= rooms["x"] + rooms["width"]
        nodes = browser.find_element(By.ID, "nodes-card").rect
        assert nodes["y"] >= room["y"] + room["height"]


def test_vip_pins_through_the_admin_api_and_moves_are_marked_on_the_curve(
        browser: WebDriver, populated: Populated, tmp_path: Path) -> None:
    served = populated.served
    open_dashboard(browser, served)
    WebDriverWait(browser, 15).until(lambda b: "cooking" in room_rows(b))
    browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="cooking"]').click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "room-sect").text == "auto")
    unpin = browser.find_element(By.ID, "vip-unpin")
    assert not unpin.is_displayed()
    toggle = WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.CSS_SELECTOR, '#vip-toggle[data-vip="false"]'))
    assert toggle.text == "Pin to vip"
    toggle.click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, '#vip-toggle[data-vip="true"]'))
    status, doc = call(f"{served.url}/v1/admin/vip", token=ADMIN)
    assert (status, doc["rooms"]) == (200, ["cooking"])
    assert doc["sects"][0]["pinned"] == "vip"
    WebDriverWait(browser, 10).until(lambda b: row_cells(b, "cooking")[3] == "vip")
    sect = WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "room-sect").text == "pinned"
        and b.find_element(By.ID, "room-sect"))
    assert int(sect.get_attribute("data-since")) == doc["sects"][0]["since"]
    assert sect.get_attribute("title").startswith("in the vip sect since ")
    # The move is marked on the online curve.
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "chart").get_attribute("data-marks") == "vip:pin")
    screenshot(browser, tmp_path, "vip")
    # Unpinned: it stays vip, and the rule decides from now on.
    browser.find_element(By.ID, "vip-unpin").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "room-sect").text == "auto")
    assert browser.find_element(By.ID, "room-vip").text == "yes"
    assert not browser.find_element(By.ID, "vip-unpin").is_displayed()
    # Pinned to normal: back, and marked again.
    browser.find_element(By.ID, "vip-toggle").click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, '#vip-toggle[data-vip="false"]'))
    assert call(f"{served.url}/v1/admin/vip", token=ADMIN)[1]["rooms"] == []
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "chart").get_attribute("data-marks")
        == "vip:pin normal:pin")


def test_ending_a_broadcast_asks_first(browser: WebDriver, populated: Populated,
                                      tmp_path: Path) -> None:
    served = populated.served
    open_dashboard(browser, served)
    WebDriverWait(browser, 15).until(lambda b: "lobby" in room_rows(b))
    browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="lobby"]').click()
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "room-seq").text == "0")
    dialog = browser.find_element(By.ID, "confirm-end")
    # Cancelled: nothing ends.
    browser.find_element(By.ID, "end-broadcast").click()
    WebDriverWait(browser, 5).until(lambda b: dialog.is_displayed())
    screenshot(browser, tmp_path, "confirm")
    browser.find_element(By.ID, "confirm-end-no").click()
    WebDriverWait(browser, 5).until(lambda b: not dialog.is_displayed())
    assert call(f"{served.url}/v1/rooms/lobby/broadcasts") == (
        200, {"room": "lobby", "broadcasts": []})
    # Confirmed: broadcast 2 starts, the first one is listed as ended.
    browser.find_element(By.ID, "end-broadcast").click()
    WebDriverWait(browser, 5).until(lambda b: dialog.is_displayed())
    browser.find_element(By.ID, "confirm-end-yes").click()
    WebDriverWait(browser, 10).until(
        lambda b: "Broadcast 2 of lobby started" in b.find_element(By.ID, "room-note").text)
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "broadcasts").text.startswith("#1, ended"))
    status, doc = call(f"{served.url}/v1/rooms/lobby/broadcasts")
    assert status == 200
    assert [b["broadcast"] for b in doc["broadcasts"]] == [1]
    screenshot(browser, tmp_path, "ended")


@pytest.mark.parametrize(("token", "says"), [
    ("not-the-token", "The admin token was refused: unknown token (401 unauthorized)"),
    (PUBLISHER, "use the admin token, not the publisher token"),
])
def test_a_wrong_token_shows_an_error(browser: WebDriver, served: Served, tmp_path: Path,
                                      token: str, says: str) -> None:
    open_dashboard(browser, served, token)
    error = browser.find_element(By.ID, "error")
    WebDriverWait(browser, 10).until(lambda b: error.is_displayed())
    assert says in error.text
    assert browser.find_element(By.ID, "token").is_displayed()
    assert not browser.find_element(By.ID, "dashboard").is_displayed()
    assert browser.execute_script("return sessionStorage.length") == 0
    screenshot(browser, tmp_path, "refused")
    # The right one opens it.
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(ADMIN)
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "dashboard").is_displayed())
    assert not error.is_displayed()


def test_a_token_that_stops_working_brings_the_form_back(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    open_dashboard(browser, served)
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "dashboard").is_displayed())
    # The tab's token is replaced behind the page's back (as if rotated on
    # the server): the next refresh is refused and says so.
    browser.execute_script("sessionStorage.setItem('liveroom.admin.token', 'stale')")
    browser.refresh()
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "token").is_displayed())
    assert "refused" in browser.find_element(By.ID, "error").text
    screenshot(browser, tmp_path, "stale")


def readme_shot(browser: WebDriver, tmp_path: Path) -> None:
    """The finals chosen, its curve drawn: ``dashboard.png``, copied to
    ``LIVEROOM_SCREENSHOT_DIR`` when set."""
    browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="finals"]').click()
    WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 200)
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "room-viewers").text not in ("\u2013", "0"))
    shot = screenshot(browser, tmp_path, "dashboard")
    target = os.environ.get("LIVEROOM_SCREENSHOT_DIR")
    if target:
        shutil.copyfile(shot, Path(target) / "dashboard.png")


def phone_shots(browser: WebDriver, tmp_path: Path) -> None:
    """The same page at a phone's width, then another room picked there."""
    with window(browser, 400, 860):
        WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 100)
        width: int = browser.execute_script("return document.documentElement.scrollWidth")
        assert width <= 400  # nothing wider than a phone: tables scroll inside their card
        screenshot(browser, tmp_path, "phone")
        # A room picked on a phone comes into view, its curve as wide as the screen.
        browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="cooking"]').click()
        WebDriverWait(browser, 10).until(
            lambda b: b.find_element(By.ID, "room-name").text == "cooking"
            and b.execute_script(
                "return document.getElementById('room').getBoundingClientRect().top") < 100)
        WebDriverWait(browser, 10).until(lambda b: stroke_pixels(b) > 100)
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 400
        screenshot(browser, tmp_path, "phone-room")


def test_the_dashboard_for_the_readme(browser: WebDriver, populated: Populated,
                                      tmp_path: Path) -> None:
    """The dashboard with a room chosen, at a laptop's and a phone's size: the
    ``docs/dashboard.png`` when ``LIVEROOM_SCREENSHOT_DIR`` is set."""
    served = populated.served
    # Polls held by the node (listeners of the plain room "chess", waiting for
    # its next message) show in the live nodes' table.
    holding = served.run(hold_polls(served, "chess", [f"chess-u{j}" for j in range(7)]))
    populated.live(0.1, step=5)
    try:
        # Wide enough (from 1400 px) for the live nodes under the rooms, in view.
        with window(browser, 1440, 900):
            open_dashboard(browser, served)
            WebDriverWait(browser, 15).until(lambda b: room_rows(b) == list(ROOMS))
            WebDriverWait(browser, 10).until(
                lambda b: b.find_element(By.CSS_SELECTOR, "#nodes tbody td:nth-child(3)").text
                == "7")
            readme_shot(browser, tmp_path)
            # The room's panel is long (its moderation): the live nodes stay
            # right under the rooms, in view, not under a stretched card.
            in_view: bool = browser.execute_script(
                "return document.getElementById('nodes-card').getBoundingClientRect().bottom"
                " <= window.innerHeight")
            assert in_view
            rooms = browser.find_element(By.ID, "rooms-card").rect
            nodes = browser.find_element(By.ID, "nodes-card").rect
            assert nodes["y"] - (rooms["y"] + rooms["height"]) < 40
        phone_shots(browser, tmp_path)
    finally:
        served.run(holding.stop())


def test_a_rooms_likes_and_top_givers_show_beside_its_curve(
        browser: WebDriver, populated: Populated, tmp_path: Path) -> None:
    served = populated.served
    for uid, count in [("fan1", 40), ("fan2", 2)]:
        status, _ = call(f"{served.url}/v1/rooms/finals/likes", "POST",
                         {"uid": uid, "count": count})
        assert status == 202
    served.run(served.node.proxy.likes.flush())
    for uid, value in [("whale", 900), ("minnow", 5), ("whale", 100)]:
        status, _ = call(f"{served.url}/v1/rooms/finals/gifts", "POST",
                         {"uid": uid, "value": value, "gift": "rocket"}, token=PUBLISHER)
        assert status == 201
    open_dashboard(browser, served)
    WebDriverWait(browser, 15).until(lambda b: "finals" in room_rows(b))
    browser.find_element(By.CSS_SELECTOR, '#rooms tbody tr[data-room="finals"]').click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "room-likes").text == "42")
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "chart").get_attribute("data-likes") == "42")
    givers = [str(li.text) for li in browser.find_elements(By.CSS_SELECTOR, "#givers li")]
    assert givers == ["1. whale: 1,000", "2. minnow: 5"]
    assert browser.find_element(By.ID, "givers").get_attribute("data-total") == "1005"
    screenshot(browser, tmp_path, "likes-and-givers")


# -- moderation ------------------------------------------------------------------------


def open_room_panel(browser: WebDriver, served: Served, room: str) -> None:
    """The dashboard with ``room`` picked by name, its moderation read."""
    open_dashboard(browser, served)
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "dashboard").is_displayed())
    browser.find_element(By.ID, "pick-room").send_keys(f"{room}\n")
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "slow-now").text not in ("", "\u2013"))


def read_list(browser: WebDriver, css: str, what: str) -> list[str]:
    """``what`` (a property of each element, like ``innerText`` or
    ``dataset.uid``) of the elements ``css`` finds, read in one go: a
    refresh that draws a list again between two reads cannot mix them."""
    found: list[str] = browser.execute_script(
        f"return [...document.querySelectorAll(arguments[0])].map((e) => e.{what});", css)
    return found


def lines(browser: WebDriver, list_id: str) -> list[str]:
    return [" ".join(line.split()) for line in read_list(browser, f"#{list_id} li", "innerText")]


def recent_seqs(browser: WebDriver) -> list[int]:
    return [int(seq) for seq in read_list(browser, "#recent li[data-seq]", "dataset.seq")]


def audit_of(served: Served, room: str) -> list[dict[str, Any]]:
    status, doc = call(f"{served.url}/v1/admin/rooms/{room}/moderation", token=ADMIN)
    assert status == 200, doc
    entries: list[dict[str, Any]] = doc["audit"]
    return entries


def test_a_moderator_recalls_a_message_from_the_rooms_latest(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    sent = [send_message(served, "talk", text, uid=uid)["seq"] for uid, text in
            [("carol", "hello"), ("troll", "rude words"), ("dave", {"text": "hi all"})]]
    pinned = send_message(served, "talk", {"event": "giveaway"}, uid="host", important=True)
    open_room_panel(browser, served, "talk")
    WebDriverWait(browser, 10).until(lambda b: recent_seqs(b) == [pinned["seq"], *sent[::-1]])
    rude = browser.find_element(By.CSS_SELECTOR, f'#recent li[data-seq="{sent[1]}"]')
    assert "troll" in rude.text
    assert "rude words" in rude.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#recent button.recall")) == 4
    # A recall is asked first (issue 46): cancelled, nothing is recalled.
    dialog = browser.find_element(By.ID, "confirm-recall")
    rude.find_element(By.CSS_SELECTOR, "button.recall").click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is not None)
    assert "troll" in dialog.text
    assert "rude words" in dialog.text
    screenshot(browser, tmp_path, "confirm-recall")
    browser.find_element(By.ID, "confirm-recall-no").click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is None)
    assert audit_of(served, "talk") == []
    rude = browser.find_element(By.CSS_SELECTOR, f'#recent li[data-seq="{sent[1]}"]')
    rude.find_element(By.CSS_SELECTOR, "button.recall").click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-recall-yes").click()
    WebDriverWait(browser, 10).until(lambda b: read_list(
        b, f'#recent li[data-seq="{sent[1]}"]', "className") == ["recalled"])
    screenshot(browser, tmp_path, "recalled")
    said = browser.find_element(By.ID, "mod-note").text
    assert said == f"Message {sent[1]} of troll recalled in talk."
    # Recalled on the server: every listener reads the tombstone.
    status, page = call(f"{served.url}/v1/rooms/talk/poll?uid=x")
    assert status == 200
    assert [(m["body"], m.get("recalled")) for m in page["messages"]] == [
        ("hello", None), (None, True), ({"text": "hi all"}, None)]
    line = browser.find_element(By.CSS_SELECTOR, f'#recent li[data-seq="{sent[1]}"]')
    assert "rude words" not in line.text
    assert line.find_elements(By.CSS_SELECTOR, "button.recall") == []
    assert [(e["action"], e["target"]) for e in audit_of(served, "talk")] == [
        ("recall", f"room:{sent[1]}")]
    WebDriverWait(browser, 10).until(
        lambda b: lines(b, "audit")[0].endswith(f"admin: recall message {sent[1]}"))
    # A uid in the list is the one to mute or ban.
    line.find_element(By.CSS_SELECTOR, "button.uid").click()
    assert browser.find_element(By.ID, "sanction-uid").get_attribute("value") == "troll"


def sanction(browser: WebDriver, uid: str, seconds: int, reason: str, button: str) -> None:
    field = browser.find_element(By.ID, "sanction-uid")
    field.clear()
    field.send_keys(uid)
    Select(browser.find_element(By.ID, "sanction-for")).select_by_value(str(seconds))
    browser.find_element(By.ID, "sanction-reason").send_keys(reason)
    browser.find_element(By.ID, button).click()


def listed(browser: WebDriver, kind: str) -> list[str]:
    return read_list(browser, f"#{kind} li[data-uid]", "dataset.uid")


def in_force(served: Served, room: str, kind: str) -> dict[str, dict[str, Any]]:
    status, doc = call(f"{served.url}/v1/admin/rooms/{room}/{kind}", token=ADMIN)
    assert status == 200, doc
    return {s["uid"]: s for s in doc[kind]}


def test_a_messages_extra_shows_beside_it_in_the_rooms_latest(
        browser: WebDriver, served: Served) -> None:
    """What the send hook attached to a message (its ``extra``) is on its line."""
    send_message(served, "hooked", "plain", uid="carol")
    marked = served.run(served.node.store.log.append("hooked", NewMessage(
        "bob", "**** it", False, int(time.time() * 1000), extra={"masked": 1})))
    open_room_panel(browser, served, "hooked")
    WebDriverWait(browser, 10).until(lambda b: len(recent_seqs(b)) == 2)
    line = browser.find_element(By.CSS_SELECTOR, f'#recent li[data-seq="{marked.seq}"]')
    assert line.find_element(By.CSS_SELECTOR, ".extra").text == '{"masked":1}'
    assert read_list(browser, "#recent li .extra", "innerText") == ['{"masked":1}']


def test_mutes_and_bans_are_given_for_a_while_listed_with_the_time_left_and_lifted(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "mods", "hello", uid="carol")
    open_room_panel(browser, served, "mods")
    WebDriverWait(browser, 10).until(lambda b: lines(b, "muted") == ["nobody"])
    sanction(browser, "troll", 600, "spam", "mute")
    WebDriverWait(browser, 10).until(lambda b: listed(b, "muted") == ["troll"])
    mute = in_force(served, "mods", "muted")["troll"]
    assert 590 <= mute["seconds_left"] <= 600
    assert (mute["reason"], mute["by"]) == ("spam", "admin")
    assert read_list(browser, "#muted .text", "textContent") == ["troll: spam"]
    (left,) = read_list(browser, "#muted .left", "textContent")
    assert re.fullmatch(r"10 min left|9 min \d{1,2} s left", left), left
    # Muted on the server: its send is refused.
    status, refused = call(f"{served.url}/v1/rooms/mods/messages", "POST",
                           {"uid": "troll", "body": "let me talk"})
    assert (status, refused["error"]) == (403, "muted")
    # A day's ban, and one until lifted (a mute cannot be).
    sanction(browser, "spammer", 86400, "", "ban")
    WebDriverWait(browser, 10).until(lambda b: listed(b, "banned") == ["spammer"])
    select = Select(browser.find_element(By.ID, "sanction-for"))
    select.select_by_value("0")
    assert not browser.find_element(By.ID, "mute").is_enabled()
    sanction(browser, "bot", 0, "flooding", "ban")
    WebDriverWait(browser, 10).until(lambda b: sorted(listed(b, "banned")) == ["bot", "spammer"])
    banned = in_force(served, "mods", "banned")
    assert (banned["bot"]["until_ms"], banned["bot"]["seconds_left"]) == (0, None)
    assert banned["bot"]["reason"] == "flooding"
    assert 86390 <= banned["spammer"]["seconds_left"] <= 86400
    left = dict(zip(listed(browser, "banned"), read_list(browser, "#banned .left", "textContent"),
                    strict=True))
    assert left["bot"] == "until lifted"
    assert re.fullmatch(r"1 d left|23 h 59 min left", left["spammer"]), left
    screenshot(browser, tmp_path, "sanctions")
    # Lifted, one by one.
    browser.find_element(By.CSS_SELECTOR, '#muted li[data-uid="troll"] button.lift').click()
    WebDriverWait(browser, 10).until(lambda b: lines(b, "muted") == ["nobody"])
    assert in_force(served, "mods", "muted") == {}
    browser.find_element(By.CSS_SELECTOR, '#banned li[data-uid="bot"] button.lift').click()
    WebDriverWait(browser, 10).until(lambda b: listed(b, "banned") == ["spammer"])
    assert set(in_force(served, "mods", "banned")) == {"spammer"}
    status, _ = call(f"{served.url}/v1/rooms/mods/messages", "POST",
                     {"uid": "troll", "body": "thanks"})
    assert status == 201
    # The audit, newest first, as the server keeps it.
    audit = audit_of(served, "mods")
    assert [(e["action"], e["target"]) for e in audit] == [
        ("unban", "bot"), ("unmute", "troll"), ("ban", "bot"), ("ban", "spammer"),
        ("mute", "troll")]
    WebDriverWait(browser, 10).until(lambda b: len(lines(b, "audit")) == len(audit))
    assert read_list(browser, "#audit li", "dataset.action") == [e["action"] for e in audit]
    assert lines(browser, "audit")[-1].endswith("admin: mute troll for 10 min (spam)")
    assert lines(browser, "audit")[2].endswith("admin: ban bot until lifted (flooding)")


def test_slow_mode_is_set_and_lifted_from_the_dashboard(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "calm", "hello", uid="carol")
    open_room_panel(browser, served, "calm")
    assert browser.find_element(By.ID, "slow-now").text == "off"
    assert not browser.find_element(By.ID, "slow-lift").is_displayed()
    field = browser.find_element(By.ID, "slow-seconds")
    field.clear()
    field.send_keys("30")
    browser.find_element(By.ID, "slow-set").click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "slow-now").get_attribute("data-seconds") == "30")
    screenshot(browser, tmp_path, "slow")
    assert browser.find_element(By.ID, "slow-now").text == "on: one message per 30 s"
    status, doc = call(f"{served.url}/v1/admin/rooms/calm/moderation", token=ADMIN)
    assert (status, doc["slow"]) == (200, 30)
    status, answer = call(f"{served.url}/v1/rooms/calm/poll?uid=reader")
    assert answer["slow"] == 30  # listeners are told
    browser.find_element(By.ID, "slow-lift").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "slow-now").text == "off")
    assert call(f"{served.url}/v1/admin/rooms/calm/moderation", token=ADMIN)[1]["slow"] == 0
    WebDriverWait(browser, 10).until(
        lambda b: read_list(b, "#audit li", "dataset.action") == ["slow", "slow"])
    assert [line.split(" ", 1)[1] for line in lines(browser, "audit")] == [
        "admin: slow mode off", "admin: slow mode 30 s"]


def held_ids(browser: WebDriver) -> list[str]:
    return read_list(browser, "#held li[data-id]", "dataset.id")


def test_a_moderator_approves_and_denies_held_messages_after_a_confirmation(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    from liveroom.model import NewMessage

    send_message(served, "review", "hello", uid="carol")
    for uid, body, why in [("bob", {"text": "darn it"}, "word: darn"),
                           ("eve", "buy cheap pills", "hook: spam"),
                           ("host", {"event": "quiz"}, "hook: unsure")]:
        served.run(served.node.review.hold(
            "review", NewMessage(uid, body, uid == "host", int(time.time() * 1000)), why))
    open_room_panel(browser, served, "review")
    WebDriverWait(browser, 10).until(lambda b: held_ids(b) == ["1", "2", "3"])
    assert browser.find_element(By.ID, "held-count").text == "3 waiting, oldest first"
    assert [read_list(browser, f"#held li .{part}", "textContent") for part in
            ("uid", "text", "why")] == [["bob", "eve", "host"],
                                        ["darn it", "buy cheap pills", '★ {"event":"quiz"}'],
                                        ["word: darn", "hook: spam", "hook: unsure"]]
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "held"))
    screenshot(browser, tmp_path, "held")
    # Asked first: cancelled, nothing is decided.
    dialog = browser.find_element(By.ID, "confirm-review")
    approve = '#held li[data-id="1"] button.approve'
    browser.find_element(By.CSS_SELECTOR, approve).click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is not None)
    assert "Approve held message 1 of bob?" in dialog.text
    assert "darn it" in dialog.text
    assert "every listener gets it" in dialog.text
    screenshot(browser, tmp_path, "confirm-approve")
    browser.find_element(By.ID, "confirm-review-no").click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is None)
    assert audit_of(served, "review") == []
    assert call(f"{served.url}/v1/admin/rooms/review/review", token=ADMIN)[1]["count"] == 3
    # Approved: sent as bob's, gone from the list.
    browser.find_element(By.CSS_SELECTOR, approve).click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-review-yes").click()
    WebDriverWait(browser, 10).until(lambda b: held_ids(b) == ["2", "3"])
    assert browser.find_element(By.ID, "mod-note").text == \
        "Held message 1 of bob approved in review: sent as message 2."
    status, page = call(f"{served.url}/v1/rooms/review/poll?uid=x")
    assert status == 200
    assert [(m["uid"], m["body"]) for m in page["messages"]] == [
        ("carol", "hello"), ("bob", {"text": "darn it"})]
    # Denied: dropped, nobody ever reads it.
    browser.find_element(By.CSS_SELECTOR, '#held li[data-id="2"] button.deny').click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is not None)
    assert "Deny held message 2 of eve?" in dialog.text
    assert "nobody will ever see it" in dialog.text
    browser.find_element(By.ID, "confirm-review-yes").click()
    WebDriverWait(browser, 10).until(lambda b: held_ids(b) == ["3"])
    assert browser.find_element(By.ID, "mod-note").text == \
        "Held message 2 of eve denied in review."
    assert [(e["action"], e["target"]) for e in audit_of(served, "review")] == [
        ("deny", "eve:2"), ("approve", "bob:1")]
    WebDriverWait(browser, 10).until(lambda b: [
        line.split(" ", 1)[1] for line in lines(b, "audit")] == [
        "admin: deny held message 2 of eve (hook: spam)",
        "admin: approve held message 1 of bob (word: darn)"])
    status, page = call(f"{served.url}/v1/rooms/review/poll?uid=y")
    assert "buy cheap pills" not in str(page)
    # The last one, and the list says none waits.
    browser.find_element(By.CSS_SELECTOR, '#held li[data-id="3"] button.deny').click()
    WebDriverWait(browser, 5).until(lambda b: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-review-yes").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "held-empty").is_displayed())
    assert held_ids(browser) == []
    assert browser.find_element(By.ID, "held-count").text == ""
def test_the_held_messages_shown_are_the_chosen_rooms_after_a_switch(
        browser: WebDriver, served: Served) -> None:
    """Held ids are per room: room beta's message 1 must not sit under room
    alpha's text once beta is chosen (a deny would then drop beta's message
    while the dialog named alpha's)."""
    from liveroom.model import NewMessage

    for room, uid, body in (("alpha", "troll", "abusive words"),
                            ("beta", "alice", "kind words")):
        send_message(served, room, "hello", uid="host")
        served.run(served.node.review.hold(
            room, NewMessage(uid, body, False, int(time.time() * 1000)), "hook: unsure"))
    open_room_panel(browser, served, "alpha")
    WebDriverWait(browser, 10).until(
        lambda b: read_list(b, "#held li .text", "textContent") == ["abusive words"])
    pick = browser.find_element(By.ID, "pick-room")
    pick.clear()
    pick.send_keys("beta\n")
    WebDriverWait(browser, 10).until(
        lambda b: read_list(b, "#held li .uid", "textContent") == ["alice"])
    assert read_list(browser, "#held li .text", "textContent") == ["kind words"]


def filter_rows(browser: WebDriver) -> list[list[str]]:
    """The word lists' rows, their first four cells' text, read in one go (a
    read of the lists draws the table again)."""
    rows: list[list[str]] = browser.execute_script(
        "return [...document.querySelectorAll('#filters tbody tr')]"
        ".map((r) => [...r.cells].slice(0, 4).map((c) => c.innerText));")
    return rows


def save_list(browser: WebDriver, name: str, action: str, words: str, rooms: str = "") -> None:
    for field, value in (("filter-name", name), ("filter-rooms", rooms),
                         ("filter-words", words)):
        element = browser.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)
    Select(browser.find_element(By.ID, "filter-action")).select_by_value(action)
    browser.find_element(By.ID, "filter-put").click()


def test_word_lists_are_added_edited_and_deleted_from_the_dashboard(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    open_dashboard(browser, served)
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "filters-empty").is_displayed())
    save_list(browser, "scams", "block", "free money\n\n广告 ", "calm, lobby")
    WebDriverWait(browser, 10).until(
        lambda b: filter_rows(b) == [["scams", "block", "2", "calm, lobby"]])
    note = browser.find_element(By.ID, "filters-note").text
    assert note == "Word list scams saved: block, 2 words, calm, lobby."
    assert not browser.find_element(By.ID, "filters-empty").is_displayed()
    status, doc = call(f"{served.url}/v1/rooms/calm/messages", "POST",
                       {"uid": "fan", "body": "FREE money!"})
    assert (status, doc["error"]) == (403, "filtered")
    screenshot(browser, tmp_path, "filters")

    browser.find_element(By.CSS_SELECTOR, '#filters tr[data-list="scams"] button.pick').click()
    assert browser.find_element(By.ID, "filter-words").get_attribute("value") == \
        "free money\n广告"
    assert browser.find_element(By.ID, "filter-rooms").get_attribute("value") == "calm, lobby"
    Select(browser.find_element(By.ID, "filter-action")).select_by_value("mask")
    browser.find_element(By.ID, "filter-rooms").clear()
    browser.find_element(By.ID, "filter-put").click()
    WebDriverWait(browser, 10).until(
        lambda b: filter_rows(b) == [["scams", "mask", "2", "every room"]])
    status, _ = call(f"{served.url}/v1/rooms/calm/messages", "POST",
                     {"uid": "fan", "body": "FREE money!"})
    assert status == 201

    save_list(browser, "empty", "mask", "!!!")  # refused: said, the form kept
    WebDriverWait(browser, 10).until(lambda b: b.find_element(
        By.ID, "filters-note").text.startswith("Not saved: the word '!!!' has no letter"))
    assert browser.find_element(By.ID, "filter-name").get_attribute("value") == "empty"
    assert not browser.find_element(By.ID, "error").is_displayed()

    browser.find_element(By.CSS_SELECTOR,
                         '#filters tr[data-list="scams"] button.delete').click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "filters-empty").is_displayed())
    assert filter_rows(browser) == []
    assert call(f"{served.url}/v1/admin/filters", token=ADMIN)[1]["lists"] == []


def test_failed_webhook_events_are_listed_and_replayed_from_the_dashboard(
        browser: WebDriver) -> None:
    """Events given up (their receiver's port closed, a retry window of 0.2 s)
    are listed with why, and *Replay all* sends them again."""
    with served_node(webhook=f"http://127.0.0.1:{free_port()}/events",
                     webhook_secret="webhook-secret-of-the-dashboard-0123456789",
                     webhook_retry_for=0.2) as served:
        open_dashboard(browser, served)
        WebDriverWait(browser, 10).until(lambda b: b.find_element(
            By.ID, "webhooks-count").text == "no event given up")
        assert not browser.find_element(By.ID, "webhooks-replay").is_enabled()
        for uid in ("eve", "mal"):
            status, _ = call(f"{served.url}/v1/admin/rooms/calm/muted/{uid}", "PUT",
                             {"seconds": 60}, token=ADMIN)
            assert status == 200
        WebDriverWait(browser, 15).until(lambda b: b.find_element(
            By.ID, "webhooks-count").text == "2 events given up")
        rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in browser.find_elements(By.CSS_SELECTOR, "#webhooks-failed tbody tr")]
        assert [(r[1], r[2], r[3]) for r in rows] == [("uid.muted", "calm", "error")] * 2
        assert all(r[0].startswith("ev_") for r in rows)
        browser.find_element(By.ID, "webhooks-replay").click()
        WebDriverWait(browser, 10).until(lambda b: b.find_element(
            By.ID, "webhooks-note").text == "2 events sent again.")
