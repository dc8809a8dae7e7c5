"""The routes' cost table (``proxy/route_costs.py``) against the node: every
route has its row and every row a route, each bound is a declared setting,
and docs/operations.md shows the table as the module makes it."""

from __future__ import annotations

from pathlib import Path

from support import BASE

from liveroom.node import build_app
from liveroom.settings import Settings
from proxy.front.routing import ROUTES
from proxy.route_costs import COSTS, OPERATIONS, operations_page

ROOT = Path(__file__).resolve().parents[2]


def _served() -> set[str]:
    """``METHOD /path`` of every route of a node's aiohttp application (the
    HEADs aiohttp adds beside each GET left out)."""
    app = build_app(BASE)
    found = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if route.method != "HEAD" and path:
            found.add(f"{route.method} {path}")
    return found


def test_every_route_of_a_node_has_its_row_and_every_row_a_route() -> None:
    rows = [row.route for row in COSTS]
    assert len(rows) == len(set(rows)), "a route has two rows"
    served = _served()
    assert set(rows) == served, {"without a row": sorted(served - set(rows)),
                                 "no such route": sorted(set(rows) - served)}
    # The front's own routes are the same routes (aiohttp serves them on a
    # connection handed over): each has its row.
    front = {f"{method.decode()} /v1/rooms/{{room}}{path}" for path, method in ROUTES}
    assert front <= set(rows)


def test_every_bound_is_a_declared_setting() -> None:
    settings = set(Settings.__dataclass_fields__)
    for row in COSTS:
        assert set(row.bounds) <= settings, (row.route, set(row.bounds) - settings)


def test_docs_operations_shows_the_table_as_the_module_makes_it() -> None:
    page = OPERATIONS.read_text()
    assert OPERATIONS == ROOT / "docs" / "operations.md"
    assert page == operations_page(page)
