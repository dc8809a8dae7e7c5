"""The settings as documents, made from their declarations
(:class:`~liveroom.settings.Settings`): the table of docs/operations.md and
the env-file template deploy/liveroom.env. A test checks both files against
what this makes; ``python -m liveroom.settings_docs`` writes them again.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from .settings import dashed, declared, default_text, env_of, flag_of

BEGIN = "<!-- settings: made by python -m liveroom.settings_docs; edit liveroom/settings.py -->"
END = "<!-- settings: end -->"

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = ROOT / "docs" / "operations.md"
ENV_FILE = ROOT / "deploy" / "liveroom.env"

REQUIRED_WITH_REDIS = ("store", "auth", "admin_token", "publisher_token", "secret",
                       "ticket_keys", "node_id", "host", "port")
"""The env file's first block: what a node over Redis must be told."""

ENV_EXAMPLES = {"store": "redis://127.0.0.1:6379/0", "auth": "ticket"}
"""Values the first block sets (the rest is left to fill in or to default)."""

DEFAULTED = ("node_id", "host", "port")
"""First-block settings written commented out, at their default: the host is
loopback, where the upstream of deploy/nginx.conf (nginx on the node's own
machine) finds the node, and no other machine does."""


def table() -> str:
    """The settings table, one section per group, between its markers."""
    lines = [BEGIN]
    group = ""
    for name, spec, _ in declared():
        if spec.group != group:
            group = spec.group
            lines += ["", f"**{group}**", "", "| option | environment | default | meaning |",
                      "| --- | --- | --- | --- |"]
        shown = default_text(name)
        env = env_of(name) + (" (comma-separated)" if spec.many else "")
        meaning = spec.help.replace("|", "\\|")
        for old in spec.formerly:
            meaning += (f" Formerly `{dashed(old)}` (`{env_of(old)}`), still taken, "
                        "with a warning, until the next release.")
        lines.append(f"| `{flag_of(name)}` | `{env}` | {f'`{shown}`' if shown else 'none'} "
                     f"| {meaning} |")
    lines += ["", END]
    return "\n".join(lines)


def env_template() -> str:
    """deploy/liveroom.env: every setting, the ones a node over Redis needs first."""
    out = ["""# liveroom's settings, one LIVEROOM_* variable each (each is also a `liveroom
# serve` flag, the name in lowercase with dashes; LIVEROOM_TICKET_KEYS is
# --ticket-key, given once per key). Made from liveroom/settings.py
# by `python -m liveroom.settings_docs`. Copy this file out of the checkout,
# private (mode 600: it will hold the secrets, which then never show in `ps`),
# fill in the first block, and load it:
#
#   install -m 600 deploy/liveroom.env ~/liveroom.env       # a shell (README.md)
#   set -a && . ~/liveroom.env && set +a && liveroom serve
#
# As a service, deploy/liveroom.service reads /etc/liveroom/liveroom.env: the
# steps are in docs/operations.md, "Installing the kit".
#
# `liveroom secrets >> FILE` appends fresh secrets (later lines win).
# An empty value is unset; a commented line keeps the default written on it.
""", "# -- what a node over Redis must be told (the same on every node) ----------\n"]
    specs = {name: (spec, default) for name, spec, default in declared()}

    def block(name: str, active: bool) -> str:
        spec, _ = specs[name]
        text = "".join(f"# {line}\n" for line in textwrap.wrap(spec.help, 76))
        shown = "" if spec.default_text else default_text(name)
        if active:
            return text + f"{env_of(name)}={ENV_EXAMPLES.get(name, '')}\n"
        return text + f"#{env_of(name)}={shown}\n"

    for name in REQUIRED_WITH_REDIS:
        out.append(block(name, name not in DEFAULTED))
    out.append("# -- everything else: the defaults suit most deployments ------------------\n")
    out += [block(name, False) for name in specs if name not in REQUIRED_WITH_REDIS]
    return "\n".join(out)


def spliced(page: str, begin: str, end: str, block: str) -> str:
    """``page`` with what stands from its ``begin`` marker to its ``end``
    marker replaced by ``block`` (which carries both markers): a made section
    of a doc (this table, the routes' costs of ``proxy/route_costs.py``)."""
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    return head + block + tail


def operations_page(current: str) -> str:
    """docs/operations.md with its settings table made again."""
    return spliced(current, BEGIN, END, table())


def main() -> None:
    OPERATIONS.write_text(operations_page(OPERATIONS.read_text()))
    ENV_FILE.write_text(env_template())
    sys.stdout.write(f"wrote {OPERATIONS.relative_to(ROOT)} and {ENV_FILE.relative_to(ROOT)}\n")


if __name__ == "__main__":
    main()
