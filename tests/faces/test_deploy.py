"""The operator's kit in ``deploy/``, each piece checked by the tool that will
read it: nginx (``nginx -t``), systemd (``systemd-analyze verify``),
Prometheus (``promtool check rules``), and the Grafana dashboard and alert
rules against the metrics a running node really exports; ``docs/metrics.md``
lists exactly those, and their label values; the env-file template names
every setting and, with ``liveroom secrets``, starts a node over Redis as the
README says.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import textwrap
import urllib.request
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from support import (
    ADMIN,
    clean_env,
    deploy_snippet,
    deployed_nginx,
    fixed_send_buffer,
    free_port,
    held_polls,
    nginx_including,
    read_response,
    running_nginx,
    running_node,
)

from liveroom import settings_docs
from liveroom.cli import main
from liveroom.settings import Settings, former_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

METRIC = re.compile(r"\bliveroom_[a-z_]+\b")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=60, check=False)


def tool(name: str) -> str:
    """A tool ``scripts/install-test-deps`` installs (never skipped: a missing
    one is a failure of the set-up)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    assert found, f"{name} is not installed: run scripts/install-test-deps"
    return found


def test_the_nginx_config_passes_nginx_t(tmp_path: Path) -> None:
    # The file is an http-level snippet (conf.d): include it as a distribution would.
    conf = nginx_including(tmp_path, DEPLOY / "nginx.conf")
    done = run(tool("nginx"), "-t", "-p", f"{tmp_path}/", "-c", conf,
               "-e", tmp_path / "error.log")
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


def test_the_nginx_config_routes_polls_sends_and_stats_by_room() -> None:
    text = (DEPLOY / "nginx.conf").read_text()
    pattern = re.search(r'"~\^/v1/rooms/\(\?<name>([^)]*)\)/"', text)
    assert pattern, "the room map is missing"
    # The map's name pattern is the server's own room-name rule.
    assert pattern.group(1) == "[A-Za-z0-9_.-]{1,64}"
    # Room and routing hint: a vip room's polls spread over the nodes.
    assert "hash $liveroom_room:$arg_spread consistent;" in text
    assert "proxy_buffering off;" in text


def test_the_nginx_config_limits_each_address_as_the_node_does() -> None:
    """The per-address limits of deploy/nginx.conf, each the figure of the
    node's own setting behind it; writes are limited, polls (GETs) are not."""
    text = (DEPLOY / "nginx.conf").read_text()
    defaults = Settings()
    found = re.search(r"^\s*listen 80 default_server sndbuf=(\d+)k;", text, re.M)
    assert found, "the client sockets' send buffer is not fixed"
    assert int(found.group(1)) * 1024 == defaults.send_buffer
    assert f"send_timeout {defaults.write_timeout:g}s;" in text
    assert "reset_timedout_connection on;" in text
    assert "limit_conn_zone $liveroom_client zone=liveroom_connections:10m;" in text
    assert f"limit_conn liveroom_connections {defaults.connections_per_ip};" in text
    assert "    default $binary_remote_addr;" in text
    writes = re.search(r"map \$request_method \$liveroom_writer \{(.*?)\}", text, re.S)
    assert writes, "no map of the writes"
    assert re.findall(r'^\s*(\w+) "";', writes.group(1), re.M) == ["GET", "HEAD", "OPTIONS"]
    assert "limit_req_zone $liveroom_writer zone=liveroom_writes:10m rate=20r/s;" in text
    assert "limit_req zone=liveroom_writes burst=100 nodelay;" in text
    assert "limit_conn_status 429;" in text
    assert "limit_req_status 429;" in text


async def test_nginx_answers_a_flood_of_writes_429_and_still_lets_polls_through(
        tmp_path: Path) -> None:
    """One address sending as fast as it can: nginx passes the burst (100
    and the first) and what 20 a second refills, answers the rest 429, and
    no node sees those; a poll from the same address still goes through."""
    async with running_node() as node, aiohttp.ClientSession() as session:
        with deployed_nginx(tmp_path, [node.url]) as front:
            async def post(i: int) -> int:
                async with session.post(f"{front}/v1/rooms/flood/messages",
                                        json={"uid": f"u{i}", "body": "hi"}) as resp:
                    await resp.read()
                    return resp.status

            started = asyncio.get_running_loop().time()
            statuses = await asyncio.gather(*(post(i) for i in range(200)))
            took = asyncio.get_running_loop().time() - started
            passed = statuses.count(201)
            assert set(statuses) == {201, 429}
            assert 101 <= passed <= 101 + 20 * took + 1, (passed, took)
            async with session.get(f"{front}/v1/rooms/flood/poll?uid=v&recent=0") as resp:
                assert resp.status == 200
                head = await resp.json()
            assert head["seq"] == passed  # the 429s never reached the node


async def test_nginx_caps_the_connections_of_one_address(tmp_path: Path) -> None:
    """At its cap of connections in progress (the test's copy: 4; held polls
    are), the next request from that address, a poll or a send, is answered
    429 by nginx; one of them answered, the next goes through."""
    async with running_node() as node, aiohttp.ClientSession() as session:
        with deployed_nginx(tmp_path, [node.url], changes={
                "limit_conn liveroom_connections 256;": "limit_conn liveroom_connections 4;"
        }) as front:
            async with session.get(f"{front}/v1/rooms/cap/poll?uid=u") as resp:
                head = await resp.json()
            held = (f"{front}/v1/rooms/cap/poll?uid=u&epoch={head['epoch']}"
                    f"&seq={head['seq']}&iseq={head['iseq']}&timeout=60")
            polls = [asyncio.create_task(session.get(f"{held}&n={i}")) for i in range(4)]
            await held_polls(node.node.proxy.holds, 4)
            async with session.get(held) as resp:
                assert resp.status == 429
            async with session.post(f"{front}/v1/rooms/cap/messages",
                                    json={"uid": "s", "body": "hi"}) as resp:
                assert resp.status == 429
            # A send straight to the node answers the held polls.
            async with session.post(f"{node.url}/v1/rooms/cap/messages",
                                    json={"uid": "s", "body": "hi"}) as resp:
                assert resp.status == 201
            for answered in await asyncio.gather(*polls):
                assert answered.status == 200
                answered.release()
            async with session.get(f"{front}/v1/rooms/cap/poll?uid=u") as resp:
                assert resp.status == 200


async def test_nginx_fixes_the_send_buffer_of_its_client_sockets(tmp_path: Path) -> None:
    """The client sockets nginx accepts have the send buffer of its ``listen
    ... sndbuf=`` (seen by ``ss``: the kernel's ``tb``), not one the kernel
    grows."""
    async with running_node() as node:
        with deployed_nginx(tmp_path, [node.url]) as front:
            port = front.rsplit(":", 1)[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", int(port))
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await read_response(reader))[0] == 200
            done = run(tool("ss"), "-tmnH", "state", "established", f"( sport = :{port} )")
            writer.close()
            assert done.returncode == 0, done.stderr
            buffers = re.findall(r"\btb(\d+)\b", done.stdout)
            assert buffers == [str(fixed_send_buffer(Settings().send_buffer))], done.stdout


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit = (DEPLOY / "liveroom.service").read_text()
    assert "ExecStart=/opt/liveroom/bin/liveroom serve\n" in unit
    # verify checks that ExecStart's program exists: point it at this one.
    installed = shutil.which("liveroom")
    assert installed, "liveroom is not installed"
    copy = tmp_path / "liveroom.service"
    copy.write_text(unit.replace("/opt/liveroom/bin/liveroom", installed))
    done = run(tool("systemd-analyze"), "verify", copy)
    # verify exits 0 on unknown keys and bad values too, but says so.
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_alert_rules_pass_promtool() -> None:
    done = run(tool("promtool"), "check", "rules", DEPLOY / "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


async def exported_metrics() -> set[str]:
    """Every metric a node's ``/metrics`` declares (``# TYPE``; counters end in
    ``_total``, each with a ``_created`` beside it)."""
    async with running_node() as node, aiohttp.ClientSession() as session, \
            session.get(f"{node.url}/metrics",
                        headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
        assert resp.status == 200
        text = await resp.text()
    return {n for n in re.findall(r"^# TYPE (\S+) \S+$", text, re.M)
            if n.startswith("liveroom_")}


async def test_the_dashboard_and_the_alerts_name_only_metrics_a_node_exports() -> None:
    exported = await exported_metrics()
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append(dashboard["templating"]["list"][1]["definition"])
    alerts = (DEPLOY / "alerts.yml").read_text()
    exprs += re.findall(r"^\s+expr: (.+)$", alerts, re.M)
    named = {m for e in exprs for m in METRIC.findall(e)}
    assert named, "no metric found in the dashboard or the rules"
    assert named <= exported, f"not exported: {sorted(named - exported)}"
    # And the dashboard draws every counter and gauge the node has.
    drawn = {m for p in dashboard["panels"] for t in p["targets"]
             for m in METRIC.findall(t["expr"])}
    counted = {n for n in exported if not n.endswith("_created")}
    assert counted <= drawn, f"not on the dashboard: {sorted(counted - drawn)}"


async def test_the_metrics_reference_lists_every_metric() -> None:
    exported = await exported_metrics()
    listed = set(re.findall(r"^\| `(liveroom_[a-z_]+)`", (ROOT / "docs" / "metrics.md")
                            .read_text(), re.M))
    wanted = {n for n in exported if not n.endswith("_created")}
    assert listed == wanted


async def test_the_metrics_reference_names_every_label_value_a_node_exports() -> None:
    """Each labelled series a fresh node exports (its counters start at 0)
    has its label value named in its metric's row, as `` `value` `` (the
    version excepted: it is the release's)."""
    async with running_node() as node, aiohttp.ClientSession() as session, \
            session.get(f"{node.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}
                        ) as resp:
        text = await resp.text()
    rows = dict(re.findall(r"^\| `(liveroom_[a-z_]+)` (.*)$",
                           (ROOT / "docs" / "metrics.md").read_text(), re.M))
    missing = []
    for name, labels in re.findall(r"^(liveroom_[a-z_]+)\{(.*)\} ", text, re.M):
        if name.endswith("_created"):
            continue
        for label, value in re.findall(r'(\w+)="([^"]*)"', labels):
            if label != "version" and f"`{value}`" not in rows[name]:
                missing.append(f'{name}{{{label}="{value}"}}')
    assert not missing, f"not in docs/metrics.md: {missing}"


def test_the_env_template_and_the_docs_table_are_made_from_the_declarations() -> None:
    """Each setting is declared once (liveroom/settings.py); the env file and
    the table of docs/operations.md are made from it
    (``python -m liveroom.settings_docs`` writes them again)."""
    assert (DEPLOY / "liveroom.env").read_text() == settings_docs.env_template()
    page = (ROOT / "docs" / "operations.md").read_text()
    assert page == settings_docs.operations_page(page)
    serve = main.commands["serve"]
    named = set(re.findall(r"^#?(LIVEROOM_[A-Z_]+)=", settings_docs.env_template(), re.M))
    # Every setting, every option of serve: the same set; beside them, hidden,
    # only the former names of renamed settings (taken for one release).
    shown = {p.envvar for p in serve.params if not getattr(p, "hidden", False)}
    assert named == shown == {f"LIVEROOM_{f.name.upper()}" for f in fields(Settings)}
    assert {p.envvar for p in serve.params if getattr(p, "hidden", False)} == {
        f"LIVEROOM_{old.upper()}" for _, old in former_names()}


def test_the_env_template_listens_where_the_nginx_config_sends() -> None:
    """The template keeps the node on loopback, the address and port the
    upstream of deploy/nginx.conf (nginx on the node's machine) reaches: a
    node listening on every interface could be reached around nginx."""
    template = (DEPLOY / "liveroom.env").read_text()
    host = re.search(r"^#?LIVEROOM_HOST=(.*)$", template, re.M)
    port = re.search(r"^#?LIVEROOM_PORT=(.*)$", template, re.M)
    assert host
    assert port
    default = Settings()
    assert (host.group(1), port.group(1)) == (default.host, str(default.port))
    upstream = re.search(r"^\s*server (\S+) ", (DEPLOY / "nginx.conf").read_text(), re.M)
    assert upstream, "the upstream has no server"
    assert upstream.group(1) == f"{host.group(1)}:{port.group(1)}" == "127.0.0.1:8080"


def readme_recipe() -> list[str]:
    """The commands of the README's production recipe, comments left out."""
    section = (ROOT / "README.md").read_text().split("## Going to production", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the recipe is missing"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines()]


def git_ignores(name: str) -> bool:
    """Whether the checkout's .gitignore ignores a file of this name."""
    done = run("git", "-C", ROOT, "check-ignore", "--quiet", "--no-index", name)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def test_the_readmes_recipe_keeps_the_secrets_out_of_the_checkout() -> None:
    """The env file the recipe fills with secrets is written outside the
    checkout; one left in it (as the recipe used to write it) is ignored by
    git, the template never."""
    install = readme_recipe()[0].split()
    assert install[:4] == ["install", "-m", "600", "deploy/liveroom.env"]
    assert install[4].startswith(("~/", "/")), install
    assert git_ignores("liveroom.env")
    assert git_ignores(".env")
    assert not git_ignores("deploy/liveroom.env")


def test_the_readmes_redis_recipe_starts_a_node(tmp_path: Path, redis_url: str) -> None:
    """The README's recipe as written, run from the checkout with ``HOME`` a
    temporary folder: the template installed in ``~``, ``liveroom secrets >>``,
    the store and port filled in (for ``$EDITOR``), then ``set -a && .
    ~/liveroom.env && set +a && liveroom serve``: a node over Redis with the
    secrets from the file (none on the command line)."""
    install, secrets, edit, serve_line = readme_recipe()
    assert edit.startswith("$EDITOR ")
    clean = clean_env(HOME=str(tmp_path))
    env_file = tmp_path / "liveroom.env"
    for line in (install, secrets):
        done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=clean, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, (line, done.stderr)
    assert env_file.stat().st_mode & 0o777 == 0o600
    template = (DEPLOY / "liveroom.env").read_text()
    text = env_file.read_text()
    values = dict(line.split("=", 1) for line in text.removeprefix(template).splitlines())
    assert set(values) == {"LIVEROOM_ADMIN_TOKEN", "LIVEROOM_PUBLISHER_TOKEN",
                           "LIVEROOM_SECRET", "LIVEROOM_TICKET_KEYS", "LIVEROOM_METRICS_TOKEN",
                           "LIVEROOM_SEND_HOOK_SECRET", "LIVEROOM_WEBHOOK_SECRET"}
    port = free_port()
    text = text.replace("LIVEROOM_STORE=redis://127.0.0.1:6379/0", f"LIVEROOM_STORE={redis_url}")
    env_file.write_text(text + f"LIVEROOM_PORT={port}\n")
    assert serve_line.endswith(" && liveroom serve")
    proc = subprocess.Popen(
        ["bash", "-c", serve_line.replace("liveroom serve", "exec liveroom serve")],
        cwd=ROOT, env=clean, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "listening on" in line or "Error" in line:
                break
        assert "listening on" in seen[-1], "".join(seen)
        assert "store: redis" in seen[-1]
        # No secret on the command line: ps shows only this.
        with open(f"/proc/{proc.pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
        assert not any(v.encode() in b" ".join(argv) for v in values.values())
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/admin/vip",
            headers={"Authorization": f"Bearer {values['LIVEROOM_ADMIN_TOKEN']}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("missing", ["LIVEROOM_ADMIN_TOKEN", "LIVEROOM_SECRET"])
def test_the_template_alone_is_refused_saying_what_is_missing(
        tmp_path: Path, redis_url: str, missing: str) -> None:
    """The template's empty secrets are unset: serve says so, all at once."""
    env_file = tmp_path / "liveroom.env"
    text = (DEPLOY / "liveroom.env").read_text().replace(
        "LIVEROOM_STORE=redis://127.0.0.1:6379/0", f"LIVEROOM_STORE={redis_url}")
    env_file.write_text(text)
    clean = clean_env()
    done = subprocess.run(
        ["bash", "-c", "set -a && . ./liveroom.env && set +a && exec liveroom serve"],
        cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    # All at once: the ticket key and every unset secret.
    assert "--ticket-key" in done.stderr
    assert missing in done.stderr


# -- docs/operations.md, "Installing the kit": the steps name what the kit names ---

SERVICE_STEPS = "### A node as a systemd service"
PROMETHEUS_STEPS = "### Prometheus: scraping and alerts"
GRAFANA_STEPS = "### The Grafana dashboard"
NGINX_STEPS = "### nginx in front"


def blocks_under(heading: str, lang: str) -> list[str]:
    """The ``lang`` code blocks of a section of docs/operations.md (up to the
    next heading), each unindented (a block in a list item is indented)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    assert f"\n{heading}\n" in text, f"docs/operations.md has no {heading!r}"
    section = text.split(f"\n{heading}\n", 1)[1]
    # The next heading: ## or deeper (a shell block's comments start with one #).
    section = re.split(r"^##+ ", section, maxsplit=1, flags=re.M)[0]
    found = re.findall(rf"^( *)```{lang}\n(.*?)^\1```", section, re.S | re.M)
    assert found, f"no {lang} block under {heading!r}"
    return [textwrap.dedent(block) for _, block in found]


def commands(block: str) -> list[list[str]]:
    """A shell block's commands, one a line, split as the shell would."""
    return [shlex.split(line, comments=True) for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def unit_setting(key: str) -> str:
    found = re.findall(rf"^{key}=(.*)$", (DEPLOY / "liveroom.service").read_text(), re.M)
    assert len(found) == 1, (key, found)
    return found[0]


def test_the_service_steps_make_what_the_unit_names() -> None:
    """The steps make the virtualenv of the unit's ExecStart=, the user and
    group of its User= and Group=, and the env file of its EnvironmentFile=,
    root's alone in a directory of its own, filled from the template (never
    in the checkout); then install the unit, start it and ask /healthz where
    the template's node listens."""
    steps = commands(blocks_under(SERVICE_STEPS, "sh")[0])
    venv = next(s[-1] for s in steps if s[:3] == ["python3", "-m", "venv"])
    assert unit_setting("ExecStart") == f"{venv}/bin/liveroom serve"
    assert [f"{venv}/bin/pip", "install", "."] in steps
    useradd = next(s for s in steps if s[0] == "useradd")
    # --user-group: a group of the user's name, its primary group.
    assert {"--system", "--user-group"} <= set(useradd)
    assert useradd[-1] == unit_setting("User") == unit_setting("Group")
    env_file = unit_setting("EnvironmentFile")
    root_only = ["-o", "root", "-g", "root"]
    made = [["install", "-d", "-m", "700", *root_only, str(Path(env_file).parent)],
            ["install", "-m", "600", *root_only, "deploy/liveroom.env", env_file],
            [f"{venv}/bin/liveroom", "secrets", ">>", env_file],
            ["install", "-m", "644", "deploy/liveroom.service",
             "/etc/systemd/system/liveroom.service"],
            ["systemctl", "daemon-reload"],
            ["systemctl", "enable", "--now", "liveroom"],
            ["curl", f"http://{Settings().host}:{Settings().port}/healthz"]]
    assert all(step in steps for step in made), [s for s in made if s not in steps]
    # In that order, the user first.
    at = [steps.index(useradd)] + [steps.index(step) for step in made]
    assert at == sorted(at)


def test_the_service_steps_useradd_makes_the_units_user_and_group(tmp_path: Path) -> None:
    """The steps' ``useradd`` makes a system user named as the unit's User=,
    its own group the unit's Group=. Run as written on copies of this
    machine's account files (``--prefix``) where the tests run as root (as
    ``scripts/test`` does in CI: useradd writes account files as root only);
    read as written everywhere."""
    useradd = next(s for s in commands(blocks_under(SERVICE_STEPS, "sh")[0])
                   if s[0] == "useradd")
    name = useradd[-1]
    assert name == unit_setting("User") == unit_setting("Group")
    assert {"--system", "--user-group"} <= set(useradd)
    assert useradd[useradd.index("--shell") + 1] == "/usr/sbin/nologin"
    if os.geteuid() != 0:
        return
    (tmp_path / "etc").mkdir()
    for file in ("passwd", "group", "shadow", "gshadow", "login.defs"):
        if (Path("/etc") / file).exists():
            kept = [line for line in (Path("/etc") / file).read_text().splitlines(keepends=True)
                    if not line.startswith(f"{name}:")]
            (tmp_path / "etc" / file).write_text("".join(kept))
    done = run(tool("useradd"), "--prefix", tmp_path, *useradd[1:])
    assert done.returncode == 0, done.stderr
    users = {f[0]: f for f in (line.split(":") for line in
                               (tmp_path / "etc" / "passwd").read_text().splitlines())}
    groups = {f[0]: f for f in (line.split(":") for line in
                                (tmp_path / "etc" / "group").read_text().splitlines())}
    user = users[unit_setting("User")]
    assert user[3] == groups[unit_setting("Group")][2]
    assert int(user[2]) < 1000, "not a system account"
    assert user[6] == "/usr/sbin/nologin"


# Debian's /etc/nginx/nginx.conf (bookworm's nginx 1.22; Ubuntu's is the same) and
# its default site, the lines that matter here: the process lines (user, pid,
# logs, modules) are made to run in a temporary folder.
DEBIAN_NGINX_CONF = """\
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
events {{
    worker_connections 768;
}}
http {{
    {temp}
    sendfile on;
    tcp_nopush on;
    types_hash_max_size 2048;
    default_type application/octet-stream;
    access_log off;
    gzip on;
    include {etc}/conf.d/*.conf;
    include {etc}/sites-enabled/*;
}}
"""
DEBIAN_DEFAULT_SITE = """\
server {
\tlisten 80 default_server;
\tlisten [::]:80 default_server;
\troot /var/www/html;
\tindex index.html index.htm index.nginx-debian.html;
\tserver_name _;
\tlocation / {
\t\ttry_files $uri $uri/ =404;
\t}
}
"""


def debian_nginx(prefix: Path, port: int) -> Path:
    """A copy of what Debian's and Ubuntu's nginx package installs, its
    ``/etc/nginx`` in ``prefix/etc/nginx``: an nginx.conf that includes
    ``conf.d/*.conf`` and ``sites-enabled/*``, and the default site enabled
    (a link to ``sites-available/default``), its port 80 ``port`` on loopback
    (its IPv6 line left out) and its root a folder of ``prefix``; the
    nginx.conf."""
    etc = prefix / "etc" / "nginx"
    for folder in ("conf.d", "sites-available", "sites-enabled"):
        (etc / folder).mkdir(parents=True)
    www = prefix / "www"
    www.mkdir()
    (www / "index.nginx-debian.html").write_text("<h1>Welcome to nginx!</h1>\n")
    temp = " ".join(f"{kind}_temp_path {prefix / kind};"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = etc / "nginx.conf"
    conf.write_text(DEBIAN_NGINX_CONF.format(prefix=prefix, etc=etc, temp=temp))
    site = (DEBIAN_DEFAULT_SITE.replace("\tlisten [::]:80 default_server;\n", "")
            .replace("listen 80 ", f"listen 127.0.0.1:{port} ")
            .replace("/var/www/html", str(www)))
    (etc / "sites-available" / "default").write_text(site)
    (etc / "sites-enabled" / "default").symlink_to(etc / "sites-available" / "default")
    return conf


def run_file_steps(prefix: Path, steps: Sequence[list[str]]) -> None:
    """Run the steps that put files in place (``install``, ``rm``) from the
    checkout, on the copy of :func:`debian_nginx` in ``prefix``; a step of
    another kind, or naming a path outside the copy, fails the test rather
    than run on this machine."""
    for step in steps:
        argv = [arg.replace("/etc/nginx/", f"{prefix}/etc/nginx/") for arg in step]
        assert argv[0] in ("install", "rm"), f"a step the test cannot run on a copy: {step}"
        outside = [arg for arg in argv[1:]
                   if arg.startswith("/") and not arg.startswith(f"{prefix}/")]
        assert not outside, f"{step} names {outside}"
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30,
                              check=False)
        assert done.returncode == 0, (step, done.stderr)


def nginx_steps() -> tuple[list[list[str]], list[list[str]]]:
    """The steps of "nginx in front": those that put files in place, before
    ``nginx -t && systemctl reload nginx``, and the ``curl``s after it."""
    steps = commands(blocks_under(NGINX_STEPS, "sh")[0])
    check = ["nginx", "-t", "&&", "systemctl", "reload", "nginx"]
    assert check in steps, steps
    at = steps.index(check)
    return steps[:at], [step for step in steps[at + 1:] if step[0] == "curl"]


def nginx_t(prefix: Path, conf: Path) -> subprocess.CompletedProcess[str]:
    return run(tool("nginx"), "-t", "-p", f"{prefix}/", "-c", conf, "-e", prefix / "error.log")


async def test_the_nginx_steps_on_debians_nginx_leave_liveroom_answering_port_80(
        tmp_path: Path) -> None:
    """Debian's and Ubuntu's nginx package enables a default site that takes
    port 80 as its ``default_server``, with a ``server_name _`` and a folder
    of static files. The steps, run as written on a copy of that layout,
    pass ``nginx -t`` with no warning, and then port 80 answers with
    liveroom, whatever name the client asks for, and the steps' ``curl``
    gets the node's health: not the default site's 404 (before issue 46,
    ``nginx -t`` warned of a conflicting server name ``_`` and every request
    went to the default site)."""
    files, curls = nginx_steps()
    assert curls, "no step asks nginx whether liveroom answers"
    port = free_port()
    conf = debian_nginx(tmp_path, port)
    run_file_steps(tmp_path, files)
    installed = tmp_path / "etc" / "nginx" / "conf.d" / "liveroom.conf"
    assert installed.read_text() == (DEPLOY / "nginx.conf").read_text()
    async with running_node() as node, aiohttp.ClientSession() as session:
        installed.write_text(deploy_snippet([node.url], port))
        done = nginx_t(tmp_path, conf)
        assert done.returncode == 0, done.stderr
        assert "[warn]" not in done.stderr, done.stderr
        with running_nginx(tmp_path, conf, port) as front:
            for host in ("127.0.0.1", "live.example.com"):
                async with session.get(f"{front}/v1/rooms/demo/poll?uid=u",
                                       headers={"Host": host}) as resp:
                    assert resp.status == 200, (host, await resp.text())
                    assert (await resp.json())["room"] == "demo"
            for curl in curls:
                url = urlsplit(curl[-1])
                assert url.netloc == "127.0.0.1", curl  # port 80
                async with session.get(f"{front}{url.path}") as resp:
                    assert resp.status == 200, (curl, await resp.text())
                    assert await resp.json() == {"status": "ok"}


def test_debians_default_site_left_enabled_fails_nginx_t_saying_so(tmp_path: Path) -> None:
    """An operator who skips the step that disables the default site gets
    ``nginx -t`` refusing the configuration, naming that site (both servers
    are port 80's ``default_server``), rather than one that passes and
    serves the default site's 404 to every client."""
    files, _ = nginx_steps()
    port = free_port()
    conf = debian_nginx(tmp_path, port)
    run_file_steps(tmp_path, [step for step in files if step[0] == "install"])
    installed = tmp_path / "etc" / "nginx" / "conf.d" / "liveroom.conf"
    installed.write_text(deploy_snippet(["127.0.0.1:8080"], port))
    done = nginx_t(tmp_path, conf)
    assert done.returncode == 1, done.stderr
    assert "a duplicate default server" in done.stderr, done.stderr
    assert "sites-enabled/default" in done.stderr, done.stderr


def test_the_prometheus_steps_load_the_alerts_and_scrape_with_the_token(
        tmp_path: Path) -> None:
    """The steps' prometheus.yml passes ``promtool check config`` (which loads
    its rule files) with the rules at the path the steps install them to; its
    job is the one the alerts ask for; the token file it reads is what the
    steps' line writes from the unit's env file: the last metrics token (a
    later line wins), readable by its group alone."""
    sh = blocks_under(PROMETHEUS_STEPS, "sh")[0]
    config = blocks_under(PROMETHEUS_STEPS, "yaml")[0]
    rules = re.search(r"^rule_files:\n  - (\S+)$", config, re.M)
    token = re.search(r"credentials_file: (\S+)", config)
    job = re.search(r"job_name: (\S+)", config)
    assert rules
    assert token
    assert job
    assert ["install", "-m", "644", "deploy/alerts.yml", rules.group(1)] in commands(sh)
    assert f'up{{job="{job.group(1)}"}}' in (DEPLOY / "alerts.yml").read_text()
    # The token's line, run on a stand-in of the unit's env file.
    env_file = unit_setting("EnvironmentFile")
    line = next(line for line in sh.splitlines() if token.group(1) in line and "sed" in line)
    assert env_file in line
    stand_in = tmp_path / "liveroom.env"
    stand_in.write_text((DEPLOY / "liveroom.env").read_text()
                        + "LIVEROOM_METRICS_TOKEN=first\nLIVEROOM_METRICS_TOKEN=second\n")
    written = tmp_path / "metrics-token"
    line = line.replace(env_file, str(stand_in)).replace(token.group(1), str(written))
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert written.read_text() == "second\n"
    assert written.stat().st_mode & 0o777 == 0o640
    copy = config.replace(rules.group(1), str(DEPLOY / "alerts.yml")).replace(
        token.group(1), str(written))
    (tmp_path / "prometheus.yml").write_text(copy)
    done = run(tool("promtool"), "check", "config", tmp_path / "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 10 rules found" in done.stdout, done.stdout


def test_the_grafana_steps_put_the_dashboard_where_the_provider_reads() -> None:
    """Provisioned: the dashboard goes into the folder the provider names.
    Imported by hand: it asks for no data source (no ``__inputs``), its own
    Prometheus menu picks one, and its uid is the one the docs name."""
    sh, provider = blocks_under(GRAFANA_STEPS, "sh")[0], blocks_under(GRAFANA_STEPS, "yaml")[0]
    path = re.search(r"^\s+path: (\S+)$", provider, re.M)
    assert path
    (step,) = commands(sh)
    assert step[:-1] == ["install", "-D", "-m", "644", "deploy/grafana-dashboard.json"]
    assert Path(step[-1]).parent == Path(path.group(1))
    assert step[-1].endswith(".json")
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert "__inputs" not in dashboard
    assert dashboard["templating"]["list"][0]["type"] == "datasource"
    assert dashboard["templating"]["list"][0]["query"] == "prometheus"
    assert dashboard["uid"] == "liveroom"
