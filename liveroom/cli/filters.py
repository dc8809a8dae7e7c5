"""The word filter from a terminal: ``liveroom filters list``, ``put`` and
``delete`` its lists, through a running server or, with --store, in the
store itself (every node reads a change from the store within about a
second)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

import click

from ..clock import SystemClock
from ..settings import DEFAULTS
from .calls import operate
from .options import check_room, operators_options
from .times import when

if TYPE_CHECKING:
    from ..client import WordList
    from ..store.base import Store
    from ..store.base import WordList as StoredList


def _check_list_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from ..store.base import check_filter_name

    try:
        return check_filter_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _check_rooms(ctx: click.Context, param: click.Parameter,
                 value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(check_room(ctx, param, room) for room in value)


def _client_list(stored: StoredList) -> WordList:
    from ..client import WordList

    return WordList(stored.name, stored.action, stored.rooms, stored.words, stored.version,
                    stored.at_ms)


def _rooms_text(rooms: Sequence[str]) -> str:
    return "rooms " + ", ".join(rooms) if rooms else "every room"


def _said(word_list: WordList) -> str:
    count = len(word_list.words)
    return (f"{word_list.name}: {word_list.action}, {count} word{'s' if count != 1 else ''}, "
            f"{_rooms_text(word_list.rooms)}")


@click.group()
def filters() -> None:
    """The word filter: lists of words, each with an action, for every room
    or some.

    A send holding a listed word (case, full-width letters, accents, and
    spaces, symbols or zero-width characters slipped between its letters do
    not hide it) is refused (block: HTTP 403 filtered), stored with the word
    as *** (mask), or sent to the review queue (hold). The backend's tokens
    are never filtered. Every node applies a change within about a second.
    """


@filters.command("list")
@click.option("--words", "show_words", is_flag=True, help="Print each list's words too, "
              "one a line under it.")
@operators_options
def filters_list(show_words: bool, url: str, admin_token: str | None,
                 store: str | None) -> None:
    """Print every word list, one a line: its name, action, how many words,
    the rooms it applies to, and when it was put."""

    async def through_store(s: Store) -> tuple[WordList, ...]:
        _, versions = await s.filters.versions(0)
        found = await s.filters.lists(sorted(versions or ()))
        return tuple(_client_list(found[name]) for name in sorted(found))

    lists = operate(url, admin_token, store, lambda c: c.word_lists(), through_store)
    for word_list in lists:
        click.echo(f"{_said(word_list)} (put {when(word_list.at_ms)})")
        if show_words:
            for word in word_list.words:
                click.echo(f"  {word}")
    if not lists:
        click.echo("no word lists", err=True)


def _read_words(given: tuple[str, ...], files: tuple[TextIO, ...]) -> list[str]:
    words = list(given)
    for file in files:
        try:
            words += [line.strip() for line in file if line.strip()]
        except UnicodeDecodeError as exc:
            raise click.BadParameter(
                f"{file.name} is not UTF-8 text ({exc.reason} at byte {exc.start}): save "
                f"the list as UTF-8, or convert it (iconv -f GBK -t UTF-8 ...)",
                param_hint="--words-file") from None
    return words


@filters.command("put")
@click.argument("name", callback=_check_list_name, metavar="NAME")
@click.option("--action", type=click.Choice(["block", "hold", "mask"]), required=True,
              help="What a send holding one of its words gets: block (refused, HTTP 403 "
                   "filtered), hold (to the review queue) or mask (stored with the word as "
                   "*).")
@click.option("--word", "given", multiple=True, metavar="WORD",
              help="A word (or phrase); repeat it for several.")
@click.option("--words-file", "files", type=click.File(encoding="utf-8"), multiple=True,
              metavar="FILE", help="A file of words, one a line (blank lines skipped); - "
                                   "for standard input. Repeatable, and with --word.")
@click.option("--room", "rooms", multiple=True, callback=_check_rooms, metavar="ROOM",
              help="A room it applies to; repeat it for several. None: every room.")
@operators_options
def filters_put(name: str, action: str, given: tuple[str, ...], files: tuple[TextIO, ...],
                rooms: tuple[str, ...], url: str, admin_token: str | None,
                store: str | None) -> None:
    """Store the word list NAME, replacing a list of that name.

    Each word once (1 to --filter-words-max, 10 000 by default, of 1 to
    --filter-word-chars characters, 32, each with a letter or digit). With
    --store the default limits apply (16 lists). Prints the list as
    stored: name, action, words, rooms.
    """
    words = _read_words(given, files)
    if not words:
        raise click.UsageError("give the list's words: --word WORD or --words-file FILE")

    async def through_store(s: Store) -> WordList:
        from ..store.base import made_list

        stored = made_list(name, action, words, rooms, int(SystemClock().time() * 1000))
        try:
            version = await s.filters.put(stored, DEFAULTS.filter_limits())
        except ValueError as exc:  # what the store refuses (a word too long, too many lists)
            raise click.ClickException(str(exc)) from None
        return _client_list(replace(stored, version=version))

    word_list = operate(url, admin_token, store,
                        lambda c: c.put_word_list(name, words, action, rooms), through_store)
    click.echo(f"word list {_said(word_list)} (version {word_list.version})")


@filters.command("delete")
@click.argument("name", callback=_check_list_name, metavar="NAME")
@operators_options
def filters_delete(name: str, url: str, admin_token: str | None, store: str | None) -> None:
    """Delete the word list NAME (an error when there is none)."""

    async def through_store(s: Store) -> None:
        if await s.filters.delete(name) is None:
            raise click.ClickException(f"no word list is named {name}")

    operate(url, admin_token, store, lambda c: c.delete_word_list(name), through_store)
    click.echo(f"word list {name} deleted")
