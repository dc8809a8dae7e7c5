"""The pages and static files: what a person opening liveroom in a browser gets.

- ``GET /`` what liveroom is, what to do, and a form to pick a room
  (``static/index.html``);
- ``GET /rooms/{room}`` the room page (``static/room.html``; its script reads
  the room from the address); a name that is not a room name is a 400 JSON
  error, like every other route taking a room;
- ``GET /admin`` the operators' dashboard (``static/admin.html``);
- ``GET /static/{name}`` the files of ``proxy/static/`` (``liveroom.js``, the
  pages' scripts and styles);
- ``GET /static/vendor/{lib}/{name}`` the files of a vendored library,
  directly in ``proxy/static/vendor/{lib}/`` (uPlot, with its license), by
  the same rules: one dict per library, loaded once.

**Only what is there.** The directory is read once, when the routes are
built: every regular file directly in it (no sub-folders, no dot-files) with a
known type becomes an entry of one dict, and a request is a look-up in that
dict. Nothing a client sends is ever joined to a path, so no name
(``..``, an encoded slash, a symlink added later) reaches another file: any
name not in the dict is a 404 JSON error. The price: a file changed on disk
is served from the next start on.

**Caching.** Every file is sent with a strong ``ETag`` (a hash of its bytes)
and ``Cache-Control: no-cache``: a browser keeps its copy and revalidates it
(a ``304`` without the body), so a page loads from its cache yet never runs
a script of another version than the server's after an upgrade. Text files
that shrink are also sent gzipped to clients that accept gzip, packed at the
first such request and kept (packing them all at level 9 took 5 ms of every
start, before the node could answer).
"""

from __future__ import annotations

import gzip
import hashlib
import html
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from liveroom.errors import BadRequest
from liveroom.model import check_name

STATIC = Path(__file__).parent.parent / "static"
"""The files served under ``/static/``, kept in the package (package data)."""

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".ts": "text/plain; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
}
"""Content type by file suffix; a file of another suffix is not served."""

NOT_SERVED = frozenset({"package.json"})
"""Files of the folder that are not assets: the npm package's manifest."""

COMPRESSIBLE = ("text/", "application/json", "image/svg+xml")
"""Types kept gzipped too (when that saves a tenth); images are compressed already."""

PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
               "base-uri 'none'; form-action 'self'")
"""The ``Content-Security-Policy`` of the pages written here (index, room and admin):
scripts, styles and requests of this origin only, so a message body can never
run as code even if a rendering bug let it into the page as markup."""


@dataclass(frozen=True, slots=True)
class StaticFile:
    """One file as it is sent: its bytes, type and tag."""

    body: bytes
    content_type: str
    etag: str


def load_static(directory: Path) -> dict[str, StaticFile]:
    """Every servable file directly in ``directory``, by name."""
    files: dict[str, StaticFile] = {}
    for path in directory.iterdir():
        content_type = TYPES.get(path.suffix)
        if content_type is None or path.name.startswith(".") or not path.is_file() \
                or path.name in NOT_SERVED:
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        files[path.name] = StaticFile(body, content_type, etag)
    return dict(sorted(files.items()))


def packed(found: StaticFile) -> bytes | None:
    """``found`` gzipped, when its type compresses and that saves a tenth."""
    if not found.content_type.startswith(COMPRESSIBLE):
        return None
    gzipped = gzip.compress(found.body, compresslevel=9, mtime=0)
    return gzipped if len(gzipped) < len(found.body) * 0.9 else None


def bad_room_page(name: str, reason: str) -> web.Response:
    """A 400 page for a room name that cannot be one, styled like the room
    page, with the way back to the room picker."""
    body = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>liveroom: not a room name</title>
<link rel="stylesheet" href="/static/room.css">
</head>
<body class="room">
<header class="bar"><a class="home" href="/">liveroom</a><h1>not a room name</h1></header>
<div class="error" role="alert">
<p>{html.escape(repr(name)[:120])} cannot be a room: {html.escape(reason)}.</p>
<p><a href="/">Pick another room</a></p>
</div>
</body>
</html>
"""
    return web.Response(status=400, text=body, content_type="text/html", headers={
        "Content-Security-Policy": PAGE_POLICY, "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff"})


class Pages:
    """The routes of the pages and of ``/static/``, over one loaded directory."""

    def __init__(self, directory: Path = STATIC) -> None:
        self.files = load_static(directory)
        vendor = directory / "vendor"
        self.vendored = {lib.name: load_static(lib) for lib in sorted(vendor.iterdir())
                         if lib.is_dir() and not lib.name.startswith(".")} \
            if vendor.is_dir() else {}
        """Each vendored library's files, by library then name."""
        self._packed: dict[str, bytes | None] = {}
        """:func:`packed` of each file asked for gzipped so far, by ETag."""

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self.index)
        app.router.add_get("/rooms/{room}", self.room)
        app.router.add_get("/admin", self.admin)
        app.router.add_get("/static/{name}", self.static)
        app.router.add_get("/static/vendor/{lib}/{name}", self.vendor)

    async def index(self, request: web.Request) -> web.StreamResponse:
        return self._file(request, "index.html", policy=PAGE_POLICY)

    async def room(self, request: web.Request) -> web.StreamResponse:
        """The room page; a name that cannot be a room's is a 400, as a page
        for a browser (it asks for HTML) and as the API's JSON otherwise."""
        try:
            check_name("room", request.match_info["room"])
        except BadRequest as exc:
            if "text/html" not in request.headers.get("Accept", ""):
                raise
            return bad_room_page(request.match_info["room"], exc.message)
        return self._file(request, "room.html", policy=PAGE_POLICY)

    async def admin(self, request: web.Request) -> web.StreamResponse:
        return self._file(request, "admin.html", policy=PAGE_POLICY)

    async def static(self, request: web.Request) -> web.StreamResponse:
        return self._file(request, request.match_info["name"])

    async def vendor(self, request: web.Request) -> web.StreamResponse:
        lib, name = request.match_info["lib"], request.match_info["name"]
        return self._file(request, name, files=self.vendored.get(lib, {}))

    def _file(self, request: web.Request, name: str, policy: str | None = None,
              files: dict[str, StaticFile] | None = None) -> web.StreamResponse:
        found = (self.files if files is None else files).get(name)
        if found is None:
            raise web.HTTPNotFound(text=f"no file {name!r} here")
        headers = {"ETag": found.etag, "Cache-Control": "no-cache",
                   "X-Content-Type-Options": "nosniff", "Vary": "Accept-Encoding"}
        if policy is not None:
            headers["Content-Security-Policy"] = policy
        if found.etag in request.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers=headers)
        body = found.body
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            if found.etag not in self._packed:
                self._packed[found.etag] = packed(found)
            gzipped = self._packed[found.etag]
            if gzipped is not None:
                body = gzipped
                headers["Content-Encoding"] = "gzip"
        headers["Content-Type"] = found.content_type
        return web.Response(body=body, headers=headers)
