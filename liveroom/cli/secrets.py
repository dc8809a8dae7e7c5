"""``liveroom secrets``: fresh random values for every secret setting, as the
lines of an env file."""

from __future__ import annotations

import secrets

import click

from ..settings import SECRETS, env_of


@click.command("secrets")
def secrets_command() -> None:
    """Print fresh random values for every secret setting, as env-file lines.

    One LIVEROOM_NAME=VALUE line each (the admin and publisher tokens, the
    context secret, a ticket key, a metrics token, the send hook's and the
    webhooks' secrets;
    32 random bytes each, URL-safe base64). Append them to a copy of deploy/liveroom.env, whose
    empty lines for them come earlier, so these win:

        liveroom secrets >> ~/liveroom.env

    Every node over one store must be given the same values.
    """
    for name in SECRETS:
        click.echo(f"{env_of(name)}={secrets.token_urlsafe(32)}")
