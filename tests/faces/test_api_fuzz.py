"""A property-based fuzz run of the v1 API from its OpenAPI document
(schemathesis): against a real ``liveroom serve`` (memory engine) over real
sockets, no answer is a 5xx, every answer's status is one the document lists
for its route, and every answer's body and content type are what the document
says. Negative data (values outside the schemas) must be refused with a 4xx.
Each operation is fuzzed alone, then sequences of generated sends followed by
polls along the answers' cursors (what the document's ``pollAgain`` link
says) check that what was accepted is delivered once and unchanged.

The number of examples per operation is bounded (:data:`EXAMPLES`) so the
whole run stays well under a minute on 2 cores, and fixed (derandomized) so
the suite is reproducible; ``LIVEROOM_FUZZ_EXAMPLES=N`` explores N fresh
random examples per operation instead. Polls are held up to their
``timeout``: the run caps it at 1 s (a cursor at a room's head is held that
long). The other changes made to a generated case: the admin token on the
operators' routes (without it they would all be 401), and ``Accept:
application/msgpack`` on every other case (msgpack answers are checked
against the document too, decoded by a deserializer registered here).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from support import ADMIN, PUBLISHER, clean_env, free_port

from proxy.api.routes import OPENAPI

EXPLORE = os.environ.get("LIVEROOM_FUZZ_EXAMPLES")
"""Set, it asks for that many examples per operation, fresh random ones each
run (a search for bugs); unset, the suite runs a fixed, reproducible set."""
EXAMPLES = int(EXPLORE or 30)
SEQUENCES = max(1, EXAMPLES // 3)
"""Sequences of sends and polls (each up to 4 sends)."""
ROOMS = itertools.count()
MSGPACK = "application/msgpack"

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance,
          negative_data_rejection]


@schemathesis.serializer("application/msgpack")
def _msgpack(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    try:
        packed: bytes = msgpack.packb(value)
    except (OverflowError, UnicodeEncodeError):  # beyond 64 bits; a lone surrogate
        reject()
    return packed


@schemathesis.deserializer("application/msgpack")
def _unpack(ctx: schemathesis.DeserializationContext, response: schemathesis.Response) -> Any:
    return msgpack.unpackb(response.content, raw=False)


REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428",
            "429", "5XX"]
"""What refuses negative data: schemathesis's list, and 413: a value past
its schema's bounds may make a body past the route's (1 001 event ids of
64 characters in a webhook replay; 5XX stays refused by
``not_a_server_error``)."""

schema = schemathesis.openapi.from_dict(
    json.loads(OPENAPI.read_text()),
    config=schemathesis.Config.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}}}))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``liveroom serve`` on a free port (memory engine, open mode, no rate limits)."""
    port = free_port()
    env = clean_env(LIVEROOM_ADMIN_TOKEN=ADMIN, LIVEROOM_PUBLISHER_TOKEN=PUBLISHER,
                    LIVEROOM_RATE_LIMITS="off", LIVEROOM_LOG_LEVEL="warning")
    proc = subprocess.Popen([sys.executable, "-m", "liveroom", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # bounded by the per-test timeout
            lines.append(line)
            if "stop with Ctrl-C" in line:
                break
        else:
            raise AssertionError(f"serve exited with {proc.wait()}: {''.join(lines)}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
        assert "Traceback" not in out, out
        assert "unexpected error" not in out, out


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


ACCEPTS = itertools.cycle(["application/json", MSGPACK])
"""Every other case asks for msgpack answers."""


def prepare(case: schemathesis.Case) -> None:
    """The admin token on the operators' routes; a poll's hold capped at 1 s;
    every other case asks for msgpack answers."""
    case.headers = {**(case.headers or {}), "Accept": next(ACCEPTS)}
    if case.operation.path.startswith("/v1/admin/"):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {ADMIN}"}
    if case.operation.path.endswith("/poll"):
        case.query = dict(case.query or {})
        timeout = str(case.query.get("timeout", 25))
        if timeout.isdigit() and 1 < int(timeout) <= 60:
            case.query["timeout"] = 1


@pytest.mark.timeout(300 if EXPLORE is None else 3600)
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXPLORE is None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
def test_the_api_keeps_its_document(case: schemathesis.Case, server: str,
                                    http: requests.Session) -> None:
    prepare(case)
    case.call_and_validate(base_url=server, session=http, checks=CHECKS, timeout=10)


SEND = schema["/v1/rooms/{room}/messages"]["POST"]
POLL = schema["/v1/rooms/{room}/poll"]["GET"]


def body_of(response: schemathesis.Response) -> dict[str, Any]:
    """An answer's document, JSON or msgpack as its content type says."""
    if response.headers.get("content-type", [""])[0].startswith(MSGPACK):
        doc: dict[str, Any] = msgpack.unpackb(response.content, raw=False)
    else:
        doc = response.json()
    return doc


def _no_word_lists(server: str, http: requests.Session) -> None:
    """Delete the word lists the operations' fuzz put: a mask list would
    change what is delivered (the filter's own tests check that)."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for word_list in http.get(f"{server}/v1/admin/filters", headers=admin,
                              timeout=10).json()["lists"]:
        http.delete(f"{server}/v1/admin/filters/{word_list['name']}", headers=admin,
                    timeout=10).raise_for_status()


@pytest.mark.timeout(300 if EXPLORE is None else 3600)
@settings(max_examples=SEQUENCES, deadline=None, derandomize=EXPLORE is None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_what_is_accepted_is_delivered_unchanged(data: st.DataObject, server: str,
                                                 http: requests.Session) -> None:
    """Generated sends to a fresh room, then polls along the answers' cursors
    and ``ctx`` (the link ``pollAgain``), all asking for JSON or all for
    msgpack answers: every answer keeps the document, and every accepted
    message is delivered once, unchanged (no word list in force), important
    ones before the chat of their answer."""
    room = f"seq-{next(ROOMS)}"
    _no_word_lists(server, http)
    accept = data.draw(st.sampled_from(["application/json", MSGPACK]), label="accept")
    call = {"base_url": server, "session": http, "checks": CHECKS, "timeout": 10,
            "headers": {"Accept": accept}}
    answer = body_of(POLL.Case(path_parameters={"room": room},
                               query={"uid": "fuzz", "recent": 0}).call_and_validate(**call))
    expected: dict[int, tuple[Any, bool]] = {}
    mine: dict[int, Any] = {}
    """Personal messages sent to the polling uid, by position."""
    for _ in range(data.draw(st.integers(0, 4), label="sends")):
        case = data.draw(SEND.as_strategy(path_parameters={"room": room}), label="send")
        if isinstance(case.body, dict):
            case.body.setdefault("uid", "sender")  # open mode: the body names the sender
            if case.body.get("important") is True or case.body.get("to") is not None:
                case.headers = {**(case.headers or {}), "Authorization": f"Bearer {PUBLISHER}"}
        response = case.call_and_validate(**call)
        if response.status_code == 201 and "pseq" in body_of(response):
            if case.body["to"] == "fuzz":
                mine.setdefault(body_of(response)["pseq"], case.body["body"])
        elif response.status_code == 201:
            # setdefault: a repeated client_msg_id answers the first send's seq
            expected.setdefault(body_of(response)["seq"],
                                (case.body["body"], case.body.get("important") is True))
    delivered: dict[int, tuple[Any, bool]] = {}
    deadline = time.monotonic() + 20  # a loaded machine pulls late: poll again
    polls = 0
    got: dict[int, Any] = {}
    while polls == 0 or len(delivered) < len(expected) or len(got) < len(mine):
        assert time.monotonic() < deadline, f"delivered {delivered}, expected {expected}"
        polls += 1
        query = {"uid": "fuzz", "epoch": answer["epoch"], "seq": answer["seq"],
                 "iseq": answer["iseq"], "ctx": answer["ctx"], "pseq": answer["pseq"],
                 "timeout": 1}
        answer = body_of(POLL.Case(path_parameters={"room": room},
                                   query=query).call_and_validate(**call))
        assert all(m["important"] for m in answer["important"])
        assert not any(m["important"] for m in answer["messages"])
        for message in answer["important"] + answer["messages"]:
            assert message["seq"] not in delivered, "delivered twice"
            delivered[message["seq"]] = (message["body"], message["important"])
        for message in answer.get("personal", []):
            assert message["to"] == "fuzz", "another listener's personal message"
            assert message["pseq"] not in got, "delivered twice"
            got[message["pseq"]] = message["body"]
        assert (answer["gap"], answer["igap"], answer["reset"]) == (0, 0, False)
    assert delivered == expected
    assert got == mine
