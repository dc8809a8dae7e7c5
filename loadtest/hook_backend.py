"""A business backend that accepts every send at once: the far end of
bench_send.py's "send with the hook on" rows, for liveroom and for Nchan.

- ``POST /hook``: liveroom's send hook (docs/api.md, "The send hook"): the
  batch's signature checked (``liveroom.signature.verify``, with
  ``--secret``), then ``accept`` for each message (401 for a bad signature).
- ``POST /nchan``: Nchan's ``nchan_publisher_upstream_request``: one message
  a request (its body), answered 304 Not Modified ("publish it as it came").

One process, aiohttp on uvloop, no access log; it prints ``listening on``
once it listens (loadtest/kit/servers.py waits for that line).

    python loadtest/hook_backend.py --port 8090 --secret SECRET
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson
import uvloop
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from liveroom.signature import HEADER, verify


def application(secret: str) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()
        if not verify(secret, request.headers.get(HEADER), raw, time.time()):
            return web.Response(status=401, text="bad signature")
        results = [{"id": m["id"], "action": "accept"} for m in orjson.loads(raw)["messages"]]
        return web.Response(body=orjson.dumps({"results": results}),
                            content_type="application/json")

    async def nchan(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=304)

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/nchan", nchan)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True)
    args = parser.parse_args()

    async def listening(app: web.Application) -> None:
        print(f"hook backend listening on 127.0.0.1:{args.port}", flush=True)

    app = application(args.secret)
    app.on_startup.append(listening)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None,
                loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
