"""The ``liveroom`` command: a package of its command modules."""

from . import listen, operators, secrets, send, serve, ticket
from .moderation import _action_text, main
from .options import DEFAULT_URL, TICKET_ENV, UID_ENV, URL_ENV
from .times import MODERATION_SECONDS_MAX, duration_text, seconds_of

main.add_command(serve.serve)
main.add_command(secrets.secrets_command)
main.add_command(ticket.ticket)
main.add_command(operators.vip)
main.add_command(operators.room)
main.add_command(listen.listen)
for command in (send.send, send.like, send.gift, send.leaderboard):
    main.add_command(command)

__all__ = ["DEFAULT_URL", "MODERATION_SECONDS_MAX", "TICKET_ENV", "UID_ENV", "URL_ENV",
           "_action_text", "duration_text", "main", "seconds_of"]
