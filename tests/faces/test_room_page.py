"""The room page in headless Chromium, against a node over real sockets:
messages arrive live, important ones apart and first, gaps are told, and
what goes wrong is shown. Waits are on the page's DOM (WebDriverWait), never
sleeps; each test saves screenshots under its ``tmp_path``.

``LIVEROOM_SCREENSHOT_DIR`` set (``scripts/screenshots`` sets it to ``docs/``):
the screenshot in docs/ of the room page is written there as ``room.png``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import Served, call, screenshot, send_message, served_node, window
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver, WebElement
from selenium.webdriver.support.ui import WebDriverWait
from support import ADMIN, PUBLISHER

from liveroom.clock import FakeClock
from liveroom.ratelimit import RateLimits, parse_windows
from liveroom.settings import Tier
from proxy.tickets import mint

PACE_MS = 3000
"""The tiered node's interval, from 1 listener on: after an answer with
messages the page's next one comes no sooner, so what is sent meanwhile
arrives in one answer."""


def text_of(browser: WebDriver, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def bodies(browser: WebDriver, css: str) -> list[str]:
    return [str(e.text) for e in browser.find_elements(By.CSS_SELECTOR, f"{css} .body")]


def have_watched(browser: WebDriver) -> bool:
    """The page shows at least one viewer (the stats it reads every few seconds)."""
    shown = text_of(browser, "#viewers")
    return shown.isdigit() and int(shown) >= 1


def open_room_page(browser: WebDriver, served: Served, room: str, uid: str) -> None:
    """Open the room page as ``uid``, with no ticket kept from another test."""
    browser.get(f"{served.url}/")
    browser.execute_script("localStorage.setItem('liveroom.uid', arguments[0]);"
                           "sessionStorage.clear();", uid)
    browser.get(f"{served.url}/rooms/{room}")


def open_room(browser: WebDriver, served: Served, room: str, uid: str = "viewer") -> None:
    """Open the room page as ``uid`` and wait until it listens (its first
    poll answered: the next one is on its way)."""
    open_room_page(browser, served, room, uid)
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "live")


def open_paced_room(browser: WebDriver, served: Served, room: str,
                    chatter: tuple[tuple[str, str], ...] = (("warm", "warm-up"),)) -> None:
    """Open the room on the tiered node and wait until the page shows the
    room's pace: the room counts its listener within seconds, and the page
    learns the pace from the next answer, so messages (``chatter``, in turn)
    are sent, one each time the condition is checked, until an answer says it."""
    sent = [0]

    def say() -> None:
        uid, text = chatter[sent[0] % len(chatter)]
        sent[0] += 1
        send_message(served, room, text, uid=uid)

    say()  # the room exists from its first message
    open_room(browser, served, room)

    def paced(driver: WebDriver) -> bool:
        if driver.find_element(By.ID, "interval").get_attribute("data-ms") == str(PACE_MS):
            return True
        say()
        return False

    WebDriverWait(browser, 20, poll_frequency=0.5).until(paced)


@pytest.fixture
def paced() -> Iterator[Served]:
    """A node whose rooms are paced from their first listener on, caching 20
    normal messages a room."""
    with served_node(tiers=(Tier(1, PACE_MS / 1000),), normal_keep=20) as node:
        yield node


def test_a_message_sent_through_the_api_shows_on_the_waiting_page(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "live", "already here", uid="early")
    open_room(browser, served, "live")
    assert bodies(browser, "#chat") == ["already here"]  # the first poll's recent ones
    # The page's poll is held; the message wakes it. (How fast is the
    # benchmarks' to say: a wall-clock bound here only measures CI's load.)
    send_message(served, "live", {"text": "hello from the API"}, uid="bob")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: "hello from the API" in bodies(b, "#chat"))
    screenshot(browser, tmp_path, "live")
    item = browser.find_elements(By.CSS_SELECTOR, "#chat .message")[-1]
    assert item.find_element(By.CSS_SELECTOR, ".uid").text == "bob"
    assert text_of(browser, "#interval") == "every message at once"
    assert int(text_of(browser, "#online")) >= 0
    # The listener counts among the viewers once its heartbeat is merged.
    WebDriverWait(browser, 15).until(have_watched)
    assert int(text_of(browser, "#viewers")) >= 1
    assert browser.find_element(By.ID, "error").get_attribute("hidden") is not None


def test_an_important_message_shows_apart_before_chat_sent_earlier(
        browser: WebDriver, paced: Served, tmp_path: Path) -> None:
    open_paced_room(browser, paced, "stage")
    # Both wait for one answer: the chat is held by the pace, the important
    # message cuts through and releases it with the chat.
    chat = send_message(paced, "stage", "chat sent first", uid="carol")
    signal = send_message(paced, "stage", {"event": "cohost_joined", "uid": "dave"},
                          uid="host", important=True)
    WebDriverWait(browser, 5, poll_frequency=0.05).until(
        lambda b: "chat sent first" in bodies(b, "#chat"))
    screenshot(browser, tmp_path, "important")
    important = browser.find_element(By.CSS_SELECTOR, "#important .message")
    # A signal reads as its name and fields; the raw JSON is its title.
    shown = important.find_element(By.CSS_SELECTOR, ".body")
    assert shown.text == "cohost joined · uid dave"
    assert shown.get_attribute("title") == '{"event":"cohost_joined","uid":"dave"}'
    assert "important" in str(important.get_attribute("class"))
    assert important.is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#chat .message.important") == []
    earlier = browser.find_elements(By.CSS_SELECTOR, "#chat .message")[-1]
    assert earlier.find_element(By.CSS_SELECTOR, ".body").text == "chat sent first"
    # Sent later, shown first: drawn before the chat and placed above it.
    assert int(str(important.get_attribute("data-seq"))) == signal["seq"] > chat["seq"]
    assert int(str(important.get_attribute("data-order"))) < int(
        str(earlier.get_attribute("data-order")))
    box = browser.find_element(By.ID, "important-box")
    assert box.location["y"] < browser.find_element(By.ID, "chat").location["y"]


def test_a_personal_message_shows_for_its_listener_alone_apart_from_the_room(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    open_room(browser, served, "gifts", uid="viewer")
    send_message(served, "gifts", {"event": "you_won", "prize": "a rocket"}, uid="system",
                 to="someone-else")
    sent = send_message(served, "gifts", {"event": "you_won", "prize": "a bike"},
                        uid="system", to="viewer")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: bodies(b, "#personal") == ["you won · prize a bike"])
    screenshot(browser, tmp_path, "personal")
    mine = browser.find_element(By.CSS_SELECTOR, "#personal .message")
    assert "personal" in str(mine.get_attribute("class"))
    assert mine.get_attribute("data-seq") == f"p{sent['pseq']}"
    box = browser.find_element(By.ID, "personal-box")
    assert box.is_displayed()
    assert box.location["y"] < browser.find_element(By.ID, "chat").location["y"]
    # The other listener's message shows nowhere; the room's chat goes on below.
    send_message(served, "gifts", "chat after", uid="carol")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: "chat after" in bodies(b, "#chat"))
    assert "rocket" not in browser.find_element(By.TAG_NAME, "body").text
    assert bodies(browser, "#personal") == ["you won · prize a bike"]


def test_a_burst_beyond_the_cache_shows_a_gap_notice(
        browser: WebDriver, paced: Served, tmp_path: Path) -> None:
    open_paced_room(browser, paced, "flood")
    for i in range(30):  # within the pace: one answer, 20 cached, the rest missed
        send_message(paced, "flood", f"burst {i}", uid="flood")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#chat .notice.gap"))
    screenshot(browser, tmp_path, "gap")
    notice = browser.find_element(By.CSS_SELECTOR, "#chat .notice.gap")
    assert "messages missed" in notice.text
    missed = int(notice.text.split()[0])
    assert missed >= 10
    WebDriverWait(browser, 5).until(lambda b: "burst 29" in bodies(b, "#chat"))
    shown = [b for b in bodies(browser, "#chat") if b.startswith("burst")]
    assert shown[-1] == "burst 29"
    assert "burst 0" not in shown


def speak_as(browser: WebDriver, uid: str) -> None:
    """Type ``uid`` under "as ..." and leave the field (its change event):
    the page listens again as ``uid``; wait until that listener's first poll
    is answered."""
    if not browser.find_element(By.ID, "uid").is_displayed():
        browser.find_element(By.CSS_SELECTOR, "#who summary").click()
    field = browser.find_element(By.ID, "uid")
    field.clear()
    field.send_keys(uid)
    browser.find_element(By.ID, "text").click()
    # The change handler shows the uid and sets the status to "connecting"
    # together; "live" again is the new listener's first answer, drawn.
    WebDriverWait(browser, 5).until(lambda b: text_of(b, "#who-uid") == uid)
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "live")


def test_speaking_as_another_uid_keeps_the_chat_without_drawing_it_twice(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    """A new uid is a new listener whose first poll brings the recent
    messages again: each still shows once, and the chat carries on."""
    said = ["first", "second", "third"]
    for i, text in enumerate(said):
        send_message(served, "rename", text, uid=("bob", "carol")[i % 2])
    open_room(browser, served, "rename", uid="viewer")
    assert bodies(browser, "#chat") == said
    speak_as(browser, "bob")
    screenshot(browser, tmp_path, "renamed")
    assert bodies(browser, "#chat") == said
    # The lines kept follow the new uid: bob's are now "mine".
    mine = browser.find_elements(By.CSS_SELECTOR, "#chat .message.mine .body")
    assert [m.text for m in mine] == ["first", "third"]
    send_message(served, "rename", "after the change", uid="carol")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: "after the change" in bodies(b, "#chat"))
    assert bodies(browser, "#chat") == [*said, "after the change"]
    # And back: still once each.
    speak_as(browser, "viewer")
    assert bodies(browser, "#chat") == [*said, "after the change"]
    assert browser.find_elements(By.CSS_SELECTOR, "#chat .notice") == []


def test_an_ended_broadcast_leaves_its_chat_above_a_divider_and_no_pinned_message(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    """The page keeps the chat the viewer was reading, above a divider, and
    empties the important box: an ended broadcast's pinned message would read
    as the new one's."""
    send_message(served, "show", "before the end", uid="carol")
    open_room(browser, served, "show")
    send_message(served, "show", "giveaway at nine", uid="host", important=True)
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: bodies(b, "#important") == ["giveaway at nine"])
    status, ended = call(f"{served.url}/v1/admin/rooms/show/end", "POST", token=ADMIN)
    assert status == 200, ended
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#chat .notice.reset"))
    divider = browser.find_element(By.CSS_SELECTOR, "#chat .notice.reset")
    assert "the chat above is from before" in divider.text
    assert bodies(browser, "#chat") == ["before the end"]
    assert not browser.find_element(By.ID, "important-box").is_displayed()
    assert bodies(browser, "#important") == []
    # The new broadcast's chat and pinned message show as they come, below it.
    send_message(served, "show", "welcome back", uid="host", important=True)
    send_message(served, "show", "after the end", uid="carol")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: "after the end" in bodies(b, "#chat"))
    screenshot(browser, tmp_path, "ended")
    assert bodies(browser, "#chat") == ["before the end", "after the end"]
    assert bodies(browser, "#important") == ["welcome back"]
    lines = browser.find_elements(By.CSS_SELECTOR, "#chat > li")
    assert [line.get_attribute("class") for line in lines] == [
        "message", "notice reset", "message"]


def test_sending_from_the_page(browser: WebDriver, served: Served, tmp_path: Path) -> None:
    open_room(browser, served, "talk", uid="dave")
    browser.find_element(By.ID, "text").send_keys("typed in the page")
    browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]").click()
    WebDriverWait(browser, 5).until(lambda b: "typed in the page" in bodies(b, "#chat"))
    mine = browser.find_elements(By.CSS_SELECTOR, "#chat .message.mine")
    assert [m.find_element(By.CSS_SELECTOR, ".uid").text for m in mine] == ["dave"]
    assert browser.find_element(By.ID, "text").get_attribute("value") == ""
    status, page = call(f"{served.url}/v1/rooms/talk/poll?uid=x")
    assert status == 200
    assert page["messages"][-1]["body"] == {"text": "typed in the page"}
    assert page["messages"][-1]["uid"] == "dave"
    screenshot(browser, tmp_path, "sent")


def test_taps_on_the_heart_are_batched_and_counted(browser: WebDriver, served: Served,
                                                   tmp_path: Path) -> None:
    status, _ = call(f"{served.url}/v1/rooms/hearts/messages", "POST",
                     {"uid": "frank", "body": {"text": "on air"}})
    assert status == 201
    open_room(browser, served, "hearts", uid="erin")
    # Count the page's like requests (liveroom.js looks fetch up at each call).
    browser.execute_script(
        "window.likeRequests = 0; const real = window.fetch;"
        "window.fetch = (url, init) => {"
        "  if (String(url).endsWith('/likes')) window.likeRequests += 1;"
        "  return real(url, init); };")
    # Seven taps in one go (one script: a loaded machine cannot spread
    # Selenium's clicks over two of the page's 500 ms batches).
    browser.execute_script(
        "const heart = document.getElementById('heart');"
        "for (let i = 0; i < 7; i++) heart.click();")
    assert text_of(browser, "#likes") == "7"  # at once, before the node answers
    WebDriverWait(browser, 5).until(
        lambda b: call(f"{served.url}/v1/rooms/hearts/poll?uid=x")[1]["likes"] == 7)
    assert browser.execute_script("return window.likeRequests") == 1  # one batch of 7
    # Another client taps: the page shows the room's total once an answer brings it.
    status, _ = call(f"{served.url}/v1/rooms/hearts/likes", "POST",
                     {"uid": "frank", "count": 5})
    assert status == 202
    status, _ = call(f"{served.url}/v1/rooms/hearts/messages", "POST",
                     {"uid": "frank", "body": {"text": "hi"}})
    assert status == 201
    WebDriverWait(browser, 5).until(lambda b: text_of(b, "#likes") == "12")
    screenshot(browser, tmp_path, "hearts")
    # The broadcast ends: the page counts the next one's likes from its own
    # total, not from the ended one's 12.
    status, _ = call(f"{served.url}/v1/admin/rooms/hearts/end", "POST", token=ADMIN)
    assert status == 200
    send_message(served, "hearts", "next show", uid="frank")
    WebDriverWait(browser, 5).until(lambda b: "next show" in bodies(b, "#chat"))
    WebDriverWait(browser, 5).until(lambda b: text_of(b, "#likes") == "0")


def test_taps_the_node_refuses_are_taken_back_from_the_count(browser: WebDriver,
                                                            served: Served) -> None:
    status, _ = call(f"{served.url}/v1/rooms/muted-hearts/messages", "POST",
                     {"uid": "frank", "body": {"text": "on air"}})
    assert status == 201
    status, _ = call(f"{served.url}/v1/admin/rooms/muted-hearts/muted/erin", "PUT",
                     {"seconds": 600}, token=ADMIN)
    assert status == 200, status
    open_room(browser, served, "muted-hearts", uid="erin")
    browser.execute_script(
        "const heart = document.getElementById('heart');"
        "for (let i = 0; i < 3; i++) heart.click();")
    assert text_of(browser, "#likes") == "3"  # at once, before the node answers
    # Refused (403 muted): nothing was counted, and the page says so.
    WebDriverWait(browser, 5).until(lambda b: text_of(b, "#likes") == "0")
    assert browser.find_element(By.ID, "heart").get_attribute("title").startswith(
        "not counted: ")


def top_givers(browser: WebDriver) -> list[tuple[str, str]]:
    """The page's top givers as (uid, score) shown, best first (none while hidden)."""
    if browser.find_element(By.ID, "givers").get_attribute("hidden") is not None:
        return []
    return [(item.find_element(By.CSS_SELECTOR, ".uid").text,
             item.find_element(By.CSS_SELECTOR, ".score").text)
            for item in browser.find_elements(By.CSS_SELECTOR, "#ranking li")]


def test_the_top_givers_show_beside_the_likes_until_the_broadcast_ends(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "gifts", "on air", uid="host")
    open_room(browser, served, "gifts", uid="gina")
    assert top_givers(browser) == []  # no gifts: nothing shown
    for uid, value in [("ann", 30), ("bob", 50), ("cat", 5), ("dan", 1), ("ann", 25)]:
        status, given = call(f"{served.url}/v1/rooms/gifts/gifts", "POST",
                             {"uid": uid, "value": value, "gift": "rose"}, token=PUBLISHER)
        assert status == 201, given
    # The node reads the rankings once a second; read now, and wake the
    # page's held poll with a message: its answer carries them.
    served.run(served.node.proxy.ranking.refresh())
    send_message(served, "gifts", "thanks for the roses", uid="host")
    WebDriverWait(browser, 5).until(
        lambda b: top_givers(b) == [("ann", "55"), ("bob", "50"), ("cat", "5")])
    screenshot(browser, tmp_path, "top-givers")
    status, _ = call(f"{served.url}/v1/admin/rooms/gifts/end", "POST", token=ADMIN)
    assert status == 200
    served.run(served.node.proxy.ranking.refresh())
    send_message(served, "gifts", "next show", uid="host")
    WebDriverWait(browser, 5).until(lambda b: "next show" in bodies(b, "#chat"))
    WebDriverWait(browser, 5).until(lambda b: top_givers(b) == [])
    screenshot(browser, tmp_path, "top-givers-ended")


def chat_line(browser: WebDriver, seq: int) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, f'#chat .message[data-seq="{seq}"]')


def page_text(browser: WebDriver) -> str:
    return str(browser.find_element(By.TAG_NAME, "body").text)


def test_a_message_recalled_by_a_moderator_is_marked_recalled_on_the_page(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    """The page marks a recalled message in its place ("message recalled",
    its body gone), in the chat and in the important box; a page opened
    later reads its tombstone and marks it the same."""
    send_message(served, "recalls", "fine words", uid="carol")
    rude = send_message(served, "recalls", "rude words", uid="troll")
    open_room(browser, served, "recalls", uid="viewer")
    assert bodies(browser, "#chat") == ["fine words", "rude words"]
    status, done = call(f"{served.url}/v1/rooms/recalls/messages/{rude['seq']}", "DELETE",
                        token=ADMIN)
    assert (status, done["recalled"]) == (200, True)
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: "rude words" not in page_text(b))
    screenshot(browser, tmp_path, "recalled")
    assert bodies(browser, "#chat") == ["fine words", "message recalled"]
    line = chat_line(browser, rude["seq"])
    assert "recalled" in str(line.get_attribute("class"))
    assert line.find_element(By.CSS_SELECTOR, ".uid").text == "troll"  # where it was
    assert browser.find_elements(By.CSS_SELECTOR, "#chat button.recall") == []  # not viewer's
    # An important message, recalled in its box.
    signal = send_message(served, "recalls", "giveaway at nine", uid="host", important=True)
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: bodies(b, "#important") == ["giveaway at nine"])
    status, _ = call(f"{served.url}/v1/rooms/recalls/messages/{signal['seq']}", "DELETE",
                     token=PUBLISHER)
    assert status == 200
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: bodies(b, "#important") == ["message recalled"])
    # A personal message to the viewer, recalled: marked in its box.
    prize = send_message(served, "recalls", "you won a rocket", uid="system", to="viewer")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: bodies(b, "#personal") == ["you won a rocket"])
    status, _ = call(f"{served.url}/v1/rooms/recalls/personal/{prize['pseq']}", "DELETE",
                     token=PUBLISHER)
    assert status == 200
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: bodies(b, "#personal") == ["message recalled"])
    # A page opened now: its first poll brings the tombstone, marked the same.
    open_room(browser, served, "recalls", uid="late")
    assert bodies(browser, "#chat") == ["fine words", "message recalled"]
    assert "rude words" not in page_text(browser)


def test_the_viewer_recalls_its_own_message_with_its_button(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "oops", "not mine", uid="carol")
    open_room(browser, served, "oops", uid="dave")
    browser.find_element(By.ID, "text").send_keys("tpyo in here")
    browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]").click()
    WebDriverWait(browser, 5).until(lambda b: "tpyo in here" in bodies(b, "#chat"))
    mine = browser.find_element(By.CSS_SELECTOR, "#chat .message.mine")
    seq = int(str(mine.get_attribute("data-seq")))
    # A button on its own line only.
    assert browser.find_elements(By.CSS_SELECTOR, '#chat .message[data-uid="carol"] button') == []
    screenshot(browser, tmp_path, "own-recall")
    mine.find_element(By.CSS_SELECTOR, "button.recall").click()
    WebDriverWait(browser, 5).until(
        lambda b: "recalled" in str(chat_line(b, seq).get_attribute("class")))
    assert bodies(browser, "#chat") == ["not mine", "message recalled"]
    assert chat_line(browser, seq).find_elements(By.CSS_SELECTOR, "button.recall") == []
    assert text_of(browser, "#send-error") == ""
    # Recalled on the server: the tombstone for everyone; dave's own recall is
    # no moderation, and the audit does not list it.
    status, page = call(f"{served.url}/v1/rooms/oops/poll?uid=x")
    assert status == 200
    assert [(m["seq"], m["body"], m.get("recalled")) for m in page["messages"]] == [
        (seq - 1, "not mine", None), (seq, None, True)]
    status, audit = call(f"{served.url}/v1/admin/rooms/oops/moderation", token=ADMIN)
    assert status == 200
    assert audit["audit"] == []
    # Speaking as carol: her line gets the button, dave's tombstone none.
    speak_as(browser, "carol")
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(
        By.CSS_SELECTOR, '#chat .message[data-uid="carol"] button.recall'))
    assert chat_line(browser, seq).find_elements(By.CSS_SELECTOR, "button.recall") == []


def send_own_line(browser: WebDriver, text: str) -> None:
    """Send ``text`` from the page; wait for its line, with its recall button."""
    browser.find_element(By.ID, "text").send_keys(text)
    browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]").click()
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(
        By.CSS_SELECTOR, "#chat .message.mine button.recall"))


def test_a_recall_with_a_bad_uid_in_the_field_says_so(browser: WebDriver,
                                                       served: Served) -> None:
    send_message(served, "baduid", "not mine", uid="carol")
    open_room(browser, served, "baduid", uid="dave")
    send_own_line(browser, "mine")
    browser.execute_script("document.getElementById('uid').value = 'not a uid!';")
    button = browser.find_element(By.CSS_SELECTOR, "#chat .message.mine button.recall")
    button.click()
    WebDriverWait(browser, 5).until(
        lambda b: text_of(b, "#send-error").startswith("Not recalled: uid must match"))
    assert button.is_enabled()


def test_lines_from_before_a_room_started_over_offer_no_recall(
        browser: WebDriver, served: Served) -> None:
    """The lines above the divider are of the numbering before: they answer
    to no seq of the new one (a recall of a new message of their seq must
    not mark them) and offer no recall (it would name a new message)."""
    send_message(served, "anew", "not mine", uid="carol")
    open_room(browser, served, "anew", uid="dave")
    send_own_line(browser, "before the end")
    status, _ = call(f"{served.url}/v1/admin/rooms/anew/end", "POST", token=ADMIN)
    assert status == 200
    send_message(served, "anew", "next show", uid="carol")
    WebDriverWait(browser, 5).until(lambda b: "next show" in bodies(b, "#chat"))
    old = browser.find_element(By.CSS_SELECTOR, "#chat .message.mine")
    assert old.get_attribute("data-seq") is None
    assert old.find_elements(By.CSS_SELECTOR, "button.recall") == []
    speak_as(browser, "carol")  # the buttons are offered again as another uid
    speak_as(browser, "dave")
    assert browser.find_elements(By.CSS_SELECTOR, "#chat .message.mine button.recall") == []


def test_an_own_message_past_the_recall_window_has_no_button(
        browser: WebDriver, tmp_path: Path) -> None:
    """A message sent ten minutes ago (by the node's clock, moved on since)
    is past the window: the page offers a recall for the new one only."""
    clock = FakeClock(start=time.time() - 600)
    with served_node(clock=clock) as node:
        send_message(node, "late", "hello", uid="carol")  # two senders: the room lasts
        old = send_message(node, "late", "said long ago", uid="dave")
        node.run(clock.advance(600))  # the node's clock catches up with the browser's
        new = send_message(node, "late", "said just now", uid="dave")
        open_room(browser, node, "late", uid="dave")
        screenshot(browser, tmp_path, "window")
        assert bodies(browser, "#chat") == ["hello", "said long ago", "said just now"]
        assert chat_line(browser, old["seq"]).find_elements(By.CSS_SELECTOR, "button") == []
        assert chat_line(browser, new["seq"]).find_elements(By.CSS_SELECTOR, "button.recall")


def test_slow_mode_shows_under_the_input_and_a_refusal_shows_the_wait(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "slowly", "hello", uid="carol")
    open_room(browser, served, "slowly", uid="erin")
    assert not browser.find_element(By.ID, "slow").is_displayed()
    status, _ = call(f"{served.url}/v1/admin/rooms/slowly/slow", "PUT", {"seconds": 30},
                     token=ADMIN)
    assert status == 200
    # The page learns it from its next answer: a message wakes its held poll.
    send_message(served, "slowly", "slow down everyone", uid="host")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: b.find_element(By.ID, "slow").is_displayed())
    assert text_of(browser, "#slow") == "slow mode: one message per 30 s"
    field = browser.find_element(By.ID, "text")
    assert field.get_attribute("placeholder") == "slow mode: one message per 30 s"
    submit = browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]")
    field.send_keys("first")
    submit.click()
    WebDriverWait(browser, 5).until(lambda b: "first" in bodies(b, "#chat"))
    field.send_keys("second")
    submit.click()
    WebDriverWait(browser, 5).until(lambda b: "Wait" in text_of(b, "#send-error"))
    screenshot(browser, tmp_path, "slow")
    said = text_of(browser, "#send-error")
    assert said.startswith("Not sent: slow mode, one message per 30 s. Wait "), said
    assert 1 <= int(said.split("Wait ")[1].split()[0]) <= 30, said
    assert not submit.is_enabled()  # until the wait is over
    assert field.get_attribute("value") == "second"
    # Lifted: said at the next answer, and the viewer may send at once.
    status, _ = call(f"{served.url}/v1/admin/rooms/slowly/slow", "PUT", {"seconds": 0},
                     token=ADMIN)
    assert status == 200
    send_message(served, "slowly", "back to normal", uid="host")
    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda b: not b.find_element(By.ID, "slow").is_displayed())
    assert field.get_attribute("placeholder") == "Say something"
    assert submit.is_enabled()
    assert text_of(browser, "#send-error") == ""
    submit.click()
    WebDriverWait(browser, 5).until(lambda b: "second" in bodies(b, "#chat"))


def test_the_send_button_comes_back_when_slow_mode_is_lifted_in_a_quiet_room(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    """Issue 46: the page learnt of slow mode, and of its lifting, only from
    its next answer, which in a quiet room came with its poll's timeout
    (25 s): the Send button stayed disabled for the refused send's wait.
    Now the change answers the page's held poll; nothing is sent to the
    room meanwhile."""
    send_message(served, "hushed", "hello", uid="carol")
    open_room(browser, served, "hushed", uid="erin")
    status, _ = call(f"{served.url}/v1/admin/rooms/hushed/slow", "PUT", {"seconds": 60},
                     token=ADMIN)
    assert status == 200
    WebDriverWait(browser, 5, poll_frequency=0.05).until(
        lambda b: b.find_element(By.ID, "slow").is_displayed())
    field = browser.find_element(By.ID, "text")
    submit = browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]")
    field.send_keys("first")
    submit.click()
    WebDriverWait(browser, 5).until(lambda b: "first" in bodies(b, "#chat"))
    field.send_keys("second")
    submit.click()
    WebDriverWait(browser, 5).until(lambda b: "Wait" in text_of(b, "#send-error"))
    assert not submit.is_enabled()  # for up to a minute
    status, _ = call(f"{served.url}/v1/admin/rooms/hushed/slow", "PUT", {"seconds": 0},
                     token=ADMIN)
    assert status == 200
    WebDriverWait(browser, 5, poll_frequency=0.05).until(lambda b: submit.is_enabled())
    screenshot(browser, tmp_path, "slow-lifted")
    assert not browser.find_element(By.ID, "slow").is_displayed()
    assert field.get_attribute("placeholder") == "Say something"
    assert text_of(browser, "#send-error") == ""
    assert bodies(browser, "#chat") == ["hello", "first"]
    submit.click()
    WebDriverWait(browser, 5).until(lambda b: "second" in bodies(b, "#chat"))


def test_a_refused_sends_wait_stays_when_slow_mode_is_turned_on(
        browser: WebDriver, tmp_path: Path) -> None:
    """The wait a refusal gave still holds when the room turns slow (now
    heard within a second): the page lets the viewer send again only when
    slow mode is lifted or shortened, not when it is turned on."""
    with served_node(rate_limits=RateLimits(per_uid=parse_windows("1/m"))) as node:
        send_message(node, "strict", "hello", uid="carol")
        open_room(browser, node, "strict", uid="erin")
        field = browser.find_element(By.ID, "text")
        submit = browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]")
        field.send_keys("first")
        submit.click()
        WebDriverWait(browser, 5).until(lambda b: "first" in bodies(b, "#chat"))
        field.send_keys("second")
        submit.click()
        WebDriverWait(browser, 5).until(lambda b: "Wait" in text_of(b, "#send-error"))
        status, _ = call(f"{node.url}/v1/admin/rooms/strict/slow", "PUT", {"seconds": 30},
                         token=ADMIN)
        assert status == 200
        WebDriverWait(browser, 5, poll_frequency=0.05).until(
            lambda b: b.find_element(By.ID, "slow").is_displayed())
        screenshot(browser, tmp_path, "slow-on-while-waiting")
        assert not submit.is_enabled()
        assert "Wait" in text_of(browser, "#send-error")


def test_a_muted_or_banned_viewer_is_told_the_servers_words(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    send_message(served, "muting", "hello", uid="carol")
    open_room(browser, served, "muting", uid="troll")
    status, _ = call(f"{served.url}/v1/admin/rooms/muting/muted/troll", "PUT",
                     {"seconds": 600, "reason": "spam"}, token=ADMIN)
    assert status == 200
    browser.find_element(By.ID, "text").send_keys("let me talk")
    browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]").click()
    WebDriverWait(browser, 5).until(lambda b: text_of(b, "#send-error") != "")
    screenshot(browser, tmp_path, "muted")
    said = text_of(browser, "#send-error")
    assert said.startswith("Not sent: uid troll is muted in room muting for "), said
    assert "s more" in said
    assert "A moderator muted you in this room: you can still read it." in said
    assert browser.find_element(By.ID, "text").get_attribute("value") == "let me talk"
    assert browser.find_element(By.ID, "status").get_attribute("data-state") == "live"
    # Banned: its held poll is answered 403, and the page says why it stopped.
    status, _ = call(f"{served.url}/v1/admin/rooms/muting/banned/troll", "PUT", {},
                     token=ADMIN)
    assert status == 200
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "stopped")
    screenshot(browser, tmp_path, "banned")
    assert text_of(browser, "#error-text") == (
        "Listening stopped: uid troll is banned from room muting until it is lifted"
        " — A moderator banned you from this room.")


def test_a_name_that_cannot_be_a_room_is_a_page_with_the_way_back(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    browser.get(f"{served.url}/rooms/no%20spaces")
    screenshot(browser, tmp_path, "bad-name")
    assert text_of(browser, "h1") == "not a room name"
    alert = text_of(browser, "[role=alert]")
    assert alert.startswith("'no spaces' cannot be a room: room must match")
    browser.find_element(By.LINK_TEXT, "Pick another room").click()
    WebDriverWait(browser, 5).until(lambda b: b.current_url == f"{served.url}/")
    # The API's clients still get the API's JSON.
    status, doc = call(f"{served.url}/rooms/no%20spaces")
    assert (status, doc["error"]) == (400, "bad_request")


def test_a_refused_send_is_explained(browser: WebDriver, served: Served,
                                     tmp_path: Path) -> None:
    """An important message without the publisher token: 401, said under the box."""
    open_room(browser, served, "strict", uid="eve")
    browser.find_element(By.CSS_SELECTOR, "#who summary").click()
    browser.find_element(By.ID, "important-flag").click()
    browser.find_element(By.ID, "text").send_keys("let me be important")
    browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]").click()
    WebDriverWait(browser, 5).until(lambda b: text_of(b, "#send-error") != "")
    screenshot(browser, tmp_path, "refused")
    assert text_of(browser, "#send-error").startswith("Not sent:")
    assert browser.find_element(By.ID, "text").get_attribute("value") == "let me be important"


def test_a_ticket_server_says_what_is_missing_then_takes_a_ticket(
        browser: WebDriver, tmp_path: Path) -> None:
    """A server in ticket mode refuses a page without a ticket: the page says
    so and how to fix it, instead of staying blank. With a ticket pasted it
    listens, and sends as the ticket's uid."""
    key = "k" * 32
    with served_node(auth="ticket", ticket_keys=(key,)) as node:
        open_room_page(browser, node, "locked", uid="guest")
        WebDriverWait(browser, 10).until(
            lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "stopped")
        screenshot(browser, tmp_path, "stopped")
        assert browser.find_element(By.ID, "error").is_displayed()
        assert "ticket" in text_of(browser, "#error-text")
        assert browser.find_element(By.ID, "retry").is_displayed()

        browser.find_element(By.CSS_SELECTOR, "#who summary").click()
        field = browser.find_element(By.ID, "ticket")
        field.send_keys(mint(key, "frank", rooms=["locked"]))
        browser.find_element(By.ID, "text").click()  # the field's change event
        WebDriverWait(browser, 10).until(
            lambda b: b.find_element(By.ID, "status").get_attribute("data-state") == "live")
        assert not browser.find_element(By.ID, "error").is_displayed()
        assert text_of(browser, "#who-uid") == "the ticket's uid"
        browser.find_element(By.ID, "text").send_keys("signed in")
        browser.find_element(By.CSS_SELECTOR, "#send button[type=submit]").click()
        WebDriverWait(browser, 5).until(lambda b: "signed in" in bodies(b, "#chat"))
        sender = browser.find_elements(By.CSS_SELECTOR, "#chat .message .uid")[-1]
        assert sender.text == "frank"
        screenshot(browser, tmp_path, "ticket")
        # The ticket's uid is the viewer's: its line is its own, recalled with the ticket.
        mine = browser.find_element(By.CSS_SELECTOR, '#chat .message.mine[data-uid="frank"]')
        mine.find_element(By.CSS_SELECTOR, "button.recall").click()
        WebDriverWait(browser, 5).until(lambda b: bodies(b, "#chat")[-1] == "message recalled")
        status, audit = call(f"{node.url}/v1/admin/rooms/locked/moderation", token=ADMIN)
        assert status == 200
        # frank's recall of his own line is not moderation: the audit has none.
        assert audit["audit"] == []


def test_the_room_page_for_the_readme(browser: WebDriver, tmp_path: Path) -> None:
    """A room with chat, an important message and a gap notice, at a phone's
    size: the ``docs/room.png`` when ``LIVEROOM_SCREENSHOT_DIR`` is set."""
    # Five messages cached a room: a short burst makes the gap notice.
    with served_node(tiers=(Tier(1, PACE_MS / 1000),), normal_keep=5) as paced, \
            window(browser, 430, 860):
        open_paced_room(browser, paced, "launch", chatter=(
            ("mei", "the stream is up!"), ("ravi", "hello from Pune"),
            ("lena", "sound is a bit low"), ("mei", "better now"),
            ("lena", "so many people here"), ("mei", "what's the song?")))
        send_message(paced, "launch", {"text": "co-host joined: Ana"}, uid="system",
                     important=True)
        WebDriverWait(browser, 5).until(lambda b: bodies(b, "#important"))
        for i in range(8):
            send_message(paced, "launch", ["clap", "wow", "hi Ana!", "yay"][i % 4],
                         uid=f"fan{i}")
        WebDriverWait(browser, 10).until(
            lambda b: b.find_elements(By.CSS_SELECTOR, "#chat .notice.gap"))
        send_message(paced, "launch", "what a launch", uid="lena")
        WebDriverWait(browser, 10).until(lambda b: "what a launch" in bodies(b, "#chat"))
        WebDriverWait(browser, 15).until(have_watched)
        shot = screenshot(browser, tmp_path, "room")
    target = os.environ.get("LIVEROOM_SCREENSHOT_DIR")
    if target:
        shutil.copyfile(shot, Path(target) / "room.png")


def test_a_room_nobody_has_sent_to_says_so_until_its_first_message(
        browser: WebDriver, served: Served, tmp_path: Path) -> None:
    """Issue 46: the page said "online: 0, have watched: 0" in a room with no
    message yet, and its heart tapped a room that does not exist (404)."""
    open_room(browser, served, "not-yet")
    unstarted = browser.find_element(By.ID, "unstarted")
    assert unstarted.get_attribute("hidden") is None
    assert "Nothing has been said in this room yet" in unstarted.text
    assert (text_of(browser, "#online"), text_of(browser, "#viewers")) == ("\u2013", "\u2013")
    assert browser.find_element(By.ID, "heart").get_attribute("disabled") is not None
    screenshot(browser, tmp_path, "not-yet")
    send_message(served, "not-yet", "first!", uid="host")
    WebDriverWait(browser, 10).until(lambda b: "first!" in bodies(b, "#chat"))
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "unstarted").get_attribute("hidden") is not None)
    assert browser.find_element(By.ID, "heart").get_attribute("disabled") is None
    assert text_of(browser, "#online").isdigit()
