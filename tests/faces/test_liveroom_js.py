"""liveroom.js's poll loop, tested from Node (``node --test``) against two
real nodes served on this test's event loop: ``tests/js/liveroom.test.mjs``.

Node is installed by ``scripts/install-test-deps`` like redis-server; without
it on PATH this test fails saying so. The module is copied to a ``.mjs`` file
first, so any Node from 18 on loads it as an ES module whatever its version
guesses about a ``.js`` file.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from support import ADMIN, PUBLISHER, running_node

from liveroom.ratelimit import RateLimits, Window
from proxy.api.pages import STATIC

TESTS = Path(__file__).parents[1] / "js" / "liveroom.test.mjs"


@pytest.mark.timeout(120)
async def test_liveroom_js_from_node(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: run scripts/install-test-deps")
    module = tmp_path / "liveroom.mjs"
    shutil.copyfile(STATIC / "liveroom.js", module)
    async with running_node(rate_limits=RateLimits(per_uid=(Window(1, 1),)),
                            normal_keep=20, important_keep=5,
                            important_window=0.001) as main, running_node(held_max=1) as full:
        env = {**os.environ, "LIVEROOM_JS": module.as_uri(), "LIVEROOM_URL": main.url,
               "LIVEROOM_FULL_URL": full.url, "LIVEROOM_ADMIN_TOKEN": ADMIN,
               "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER, "NODE_NO_WARNINGS": "1"}
        process = await asyncio.create_subprocess_exec(
            node, "--test", "--test-reporter=tap", str(TESTS), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await process.communicate()
    report = output.decode(errors="replace")
    print(report)
    assert process.returncode == 0, report
    assert "# fail 0" in report, report
