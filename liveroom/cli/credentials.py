"""Who speaks for a command that takes a ticket or a token: the flags given
first, then the environment."""

from __future__ import annotations

import click
from click.core import ParameterSource


def flags_first(ctx: click.Context, credentials: tuple[str, ...]) -> tuple[str, list[str]]:
    """Whose word a command takes: flags first, then the environment.

    ``credentials`` names the command's parameters that say who speaks
    (``ticket``, ``token``). When one is given as a flag, those that came from
    the environment are left aside, and so is a uid from the environment when
    the flag is ``--ticket`` (the ticket names its uid): a shell that exports
    the tokens (the production recipe's) cannot outvote a ticket typed on the
    command line. Returns the flags given (``--ticket``...) and the
    parameters left aside, for the caller to drop."""
    def given(name: str) -> ParameterSource | None:
        return ctx.get_parameter_source(name)

    flags = [name for name in credentials if given(name) is ParameterSource.COMMANDLINE]
    if not flags:
        return "", []
    aside = [name for name in credentials if given(name) is ParameterSource.ENVIRONMENT]
    if "ticket" in flags and given("uid") is ParameterSource.ENVIRONMENT:
        aside.append("uid")
    return " and ".join(f"--{name.replace('_', '-')}" for name in flags), aside


def left_aside_note(ctx: click.Context, flags: str, aside: list[str]) -> str:
    """The ``--`` line saying which environment variables a flag outvoted."""
    envs = [env for param in ctx.command.params if param.name in aside
            for env in ([param.envvar] if isinstance(param.envvar, str)
                        else param.envvar or [])]
    verb = "is" if len(envs) == 1 else "are"
    return (f"-- {' and '.join(envs)} from the environment {verb} not used: the {flags} "
            f"given speaks (a flag wins over the environment)")
