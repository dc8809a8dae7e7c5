"""A business backend's send hook and webhook endpoint, as small as they get.

    python examples/backend.py --port 8090 --secret "$SECRET"
    liveroom serve --send-hook http://127.0.0.1:8090/hook \
        --webhook http://127.0.0.1:8090/webhooks --webhook-secret "$SECRET"

POST /hook takes liveroom's batches of sends (docs/api.md, "The send hook"),
checks their signature, and answers a verdict for each: "spam" rejects,
"refund" holds it for a moderator, "darn" is masked (its body rewritten, an
extra {"masked": N} attached), anything else is accepted. POST /webhooks
checks the signature, drops an event it took before (by id: delivery is at
least once) and prints the others. Needs only aiohttp.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import time
from typing import Any

from aiohttp import web

TOLERANCE = 300  # seconds a signature is good for
EVENTS = web.AppKey("events", dict)  # the events taken, by id (a real one: a table)


def signed(secret: str, header: str, body: bytes) -> bool:
    """Liveroom-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">."""
    parts = [p.strip().partition("=") for p in header.split(",")]
    t = next((v for k, _, v in parts if k == "t"), "")
    if not t.isdigit() or abs(time.time() - int(t)) > TOLERANCE:
        return False
    expected = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(k == "v1" and hmac.compare_digest(v, expected) for k, _, v in parts)


def text_of(body: Any) -> str:
    return body if isinstance(body, str) else str(body.get("text", "")) \
        if isinstance(body, dict) else ""


def verdict(message: dict[str, Any]) -> dict[str, Any]:
    """One message's verdict: what this backend's rules say of it."""
    body, text = message["body"], text_of(message["body"]).lower()
    answer: dict[str, Any] = {"id": message["id"], "action": "accept"}
    if "spam" in text:
        answer.update(action="reject", reason="no spam here")
    elif "refund" in text:
        answer.update(action="hold", reason="asks for a refund")
    elif "darn" in text:
        masked = text_of(body).replace("darn", "****").replace("Darn", "****")
        answer["body"] = masked if isinstance(body, str) else {**body, "text": masked}
        answer["extra"] = {"masked": text.count("darn")}
    return answer


def backend(secret: str) -> web.Application:
    """The backend's application: its send hook and its webhook endpoint."""

    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()  # the signature is of these bytes
        if not signed(secret, request.headers.get("Liveroom-Signature", ""), raw):
            return web.json_response({"error": "bad signature"}, status=401)
        messages = json.loads(raw)["messages"]
        return web.json_response({"results": [verdict(m) for m in messages]})

    async def webhooks(request: web.Request) -> web.Response:
        raw = await request.read()
        if not signed(secret, request.headers.get("Liveroom-Signature", ""), raw):
            return web.json_response({"error": "bad signature"}, status=401)
        event = json.loads(raw)
        if event["id"] not in app[EVENTS]:  # a repeat is answered 200, not acted on
            app[EVENTS][event["id"]] = event
            print("webhook:", event, flush=True)  # your business here
        return web.json_response({})

    app = web.Application()
    app[EVENTS] = {}
    app.router.add_post("/hook", hook)
    app.router.add_post("/webhooks", webhooks)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--secret", default=os.environ.get("LIVEROOM_WEBHOOK_SECRET"))
    args = parser.parse_args()
    if not args.secret:
        parser.error("give --secret (or LIVEROOM_WEBHOOK_SECRET), as liveroom has it")
    web.run_app(backend(args.secret), host=args.host, port=args.port)
