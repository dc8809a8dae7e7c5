"""``liveroom serve``: every role in this process, or in each of --workers
processes on one port.

Every setting of :class:`~liveroom.settings.Settings` is one of its options,
made from the setting's declaration (each also read from an environment
variable). What a node over a shared store must be told, and weak secrets,
are refused before it starts, all at once; once it listens it says where, and
the tokens it made up.
"""

from __future__ import annotations

import gc
import logging
import sys
from typing import TYPE_CHECKING, Any

import click

from .. import __version__, build
from ..errors import ConfigError
from ..settings import (
    FORMER_SUFFIX,
    SECRET_SETTINGS,
    Settings,
    Spec,
    dashed,
    declared,
    default_text,
    env_of,
    flag_of,
    is_shared,
    settings_from,
    take_former,
    unset_secrets,
    weak_secrets,
)
from .options import URL_ENV, F
from .times import duration_text

if TYPE_CHECKING:
    from ..node import Node


def _announce(node: Node) -> None:
    s = node.settings
    click.echo(f"liveroom {__version__} node {s.name!r} listening on "
               f"http://{s.host}:{s.port} (store: {node.store.name})")
    click.echo(f"  build: {build.describe()}")
    click.echo(f"  auth: {s.auth}" + (f" ({len(s.ticket_keys)} ticket keys)"
                                      if s.auth == "ticket" else
                                      " (clients name their own uid)"))
    if s.send_hook:
        click.echo(f"  send hook: {s.send_hook} (at most {s.send_hook_timeout:g} s a send; "
                   f"late or failing: {s.send_hook_failure})")
    if s.webhook:
        kept = ("kept in the store until delivered" if s.shared_store else
                "kept in this process's memory: a restart loses the events not yet "
                "delivered (use a redis store to keep them)")
        retried = duration_text(int(s.webhook_retry_for))
        click.echo(f"  webhooks: {s.webhook} (retried for {retried}; {kept})")
    made_up = {name: value for name, value in node.generated.items()
               if name in ("admin_token", "publisher_token")}
    if made_up:
        # Ready to paste: the CLI and the examples in the README read these.
        click.echo("  tokens made up for this run (the memory store keeps nothing); "
                   "in another shell:")
        click.echo(f"    export {URL_ENV}=http://{s.host}:{s.port}")
        for name, value in made_up.items():
            click.echo(f"    export {env_of(name)}={value}")
    click.echo("  stop with Ctrl-C", nl=True)
    sys.stdout.flush()


class _KeyList(click.types.StringParamType):
    """Ticket keys (or trusted proxies): each ``--ticket-key`` one, the
    environment variable a comma-separated list."""

    name = "KEY"
    envvar_list_splitter = ","


def _store_problems(store: str, auth_given: bool,
                           secrets: dict[str, str | None]) -> list[str]:
    """What a node over a shared store (Redis: a deployment, not a demo) must
    be told rather than default to, one sentence each; on any store, tokens
    and a secret that are given must not be weak, nor the admin token the
    publisher's (the memory engine's listen on a port too; only the ones it
    makes up itself are sure to be strong)."""
    if not is_shared(store):
        return weak_secrets(secrets)
    problems = []
    if not auth_given:
        problems.append(
            f"--auth: a shared store ({store}) is a deployment: say who may speak with "
            f"--auth ticket --ticket-key KEY (signed tickets name the uid) or, knowingly, "
            f"--auth open (clients name their own uid); or set {env_of('auth')}")
    missing = unset_secrets(secrets)
    if missing:
        flags = ", ".join(flag_of(name) for name in missing)
        envs = ", ".join(env_of(name) for name in missing)
        problems.append(
            f"{flags}: every node over a shared store must be given the same tokens and "
            f"secret (made-up ones would differ between nodes): give {flags} (or {envs}; "
            f"`liveroom secrets` makes fresh ones)")
    problems += weak_secrets(secrets)
    return problems


def _refuse_all(problems: list[str]) -> None:
    """Stop ``serve`` before it starts, saying every problem at once: exit
    status 2 (a usage error)."""
    if len(problems) == 1:
        click.echo(f"Error: {problems[0]}", err=True)
    else:
        click.echo(f"Error: serve cannot start; {len(problems)} settings to fix:", err=True)
        for problem in problems:
            click.echo(f"  - {problem}", err=True)
    raise SystemExit(2)


def _settings_options(command: F) -> F:
    """Every setting of :class:`~liveroom.settings.Settings` as an option of
    ``serve``, made from its declaration: ``--NAME`` and ``LIVEROOM_NAME``.
    Values reach :func:`~liveroom.settings.settings_from` as given (``None``
    when not given), so every problem is found in one round."""
    for name, spec, default in reversed(declared()):
        help_text = spec.help
        if spec.choices:
            help_text += f" One of: {', '.join(spec.choices)}."
        shown = default_text(name)
        if shown:
            help_text += f"  [default: {shown}]"
        if spec.many:
            option = click.option(flag_of(name), name, multiple=True, type=_KeyList(),
                                  envvar=env_of(name), show_envvar=True, help=help_text,
                                  metavar=spec.metavar or None)
        elif isinstance(default, bool):
            option = click.option(flag_of(name), name, is_flag=True, default=None,
                                  envvar=env_of(name), show_envvar=True, help=help_text)
        else:
            option = click.option(flag_of(name), name, default=None, envvar=env_of(name),
                                  show_envvar=True, metavar=_metavar(name, spec, default),
                                  help=help_text)
        command = option(command)
        for old in spec.formerly:  # one release more, hidden, with a warning
            command = click.option(dashed(old), old + FORMER_SUFFIX,
                                   default=None, envvar=env_of(old),
                                   hidden=True)(command)
    return command


def _metavar(name: str, spec: Spec, default: Any) -> str:
    if spec.metavar:
        return spec.metavar
    if spec.choices:
        return "|".join(spec.choices).upper()
    if spec.parse is not None:
        return "LIST"
    return {int: "INTEGER", float: "SECONDS" if name.endswith(
        ("_ttl", "timeout", "_interval", "_every", "_window", "_refresh", "_tick",
         "_leeway", "_flush")) else "NUMBER"}.get(type(default), "TEXT")


@click.command()
@_settings_options
def serve(**given: Any) -> None:
    """Run every role (proxy, recvsvr, statsvr) in this process, or in each of
    --workers processes on one port.

    Every setting is a flag and a LIVEROOM_* environment variable (the
    setting's name in capitals: --ticket-key is LIVEROOM_TICKET_KEYS, each
    other flag its own name); deploy/liveroom.env lists them all,
    docs/operations.md explains them. Problems are reported all at once, the store URL first.
    """
    from ..store import check_store_url

    store = given["store"] or "memory"
    # Every problem in one round, the store URL first.
    problems: list[str] = []
    known_store = True
    try:
        check_store_url(store)
    except ConfigError as exc:
        problems.append(f"{exc.option}: {exc.message}")
        known_store = not exc.message.startswith("unknown store")
    for warning in take_former(given):
        click.echo(f"Warning: {warning}", err=True)
    built, found = settings_from(given)
    problems += [f"{p.option}: {p.message}" for p in found]
    if known_store:  # what is no store says nothing of what it needs
        problems += _store_problems(store, given["auth"] is not None,
                                           {name: given[name] for name in SECRET_SETTINGS})
    if problems or built is None:
        _refuse_all(problems)
    assert built is not None
    settings = built
    log_level = settings.log_level
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    workers = settings.workers
    if workers > 1:
        _supervise(settings, workers, log_level)
        return
    try:
        # No collections while the node imports and starts (node.run says why).
        gc.disable()
        from ..node import run  # the roles and aiohttp's server: only serve needs them

        run(settings, announce=_announce)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.option) from None
    except OSError as exc:  # the port: in use, or not ours to take
        raise click.ClickException(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None


def _supervise(settings: Settings, workers: int, log_level: str) -> None:
    from ..workers import CannotListen, supervise

    try:
        code = supervise(settings, workers, log_level=log_level)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.option) from None
    except CannotListen as exc:
        raise click.ClickException(str(exc)) from None
    if code:
        raise SystemExit(code)
