"""What the word filter costs a send: screening a body against lists of
``--words`` words (10 000 by default), and nothing when no list applies.

In one process, no sockets; the figures are CPU µs per call, best of
``--rounds`` rounds of ``--calls`` calls (``time.process_time``):

- **screen**: :meth:`proxy.filters.screen.Screens.screen` of chat bodies of
  20 to 60 characters (``{"text": ...}``, Latin, Chinese and mixed, none
  holding a listed word: the common case), with no list at all, with lists
  of other rooms only, and with one, three and (``--lists``) more global
  lists; then a body holding a word of a ``block`` list and one of a
  ``mask`` list (its masking included);
- **send**: :meth:`proxy.sends.send.Sends.send_at_once` of such bodies on a
  node of the memory engine (rate limits off), the whole send path without
  HTTP, with no list and with one global list: what the filter adds to a
  real send;
- **build**: the automaton of a list (folding its words included) and what
  it adds to the process's RSS, averaged over the ``--lists`` lists.

The words are made up (``--seed``): half Latin (4 to 10 letters), half
Chinese (2 to 4 characters), as a list an operator would paste.

``--base DIR``: the send with no list, A/B against the code of another
checkout (say the commit before the filter: ``git archive 3eabd15 | tar -x
-C DIR``), each in a fresh process, alternated ``--ab-runs`` times: what the
filter costs a send when no list is set.

    python loadtest/bench_filter.py
    python loadtest/bench_filter.py --words 10000 --calls 20000 --rounds 5
    python loadtest/bench_filter.py --base /tmp/base --ab-runs 5

Bounded: about ten seconds with the defaults (at most 100 000 words,
200 000 calls).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from kit.provenance import commit, invocation, versions
from kit.words import made_up_words

from liveroom.node import NODE, build_app, node_runner
from liveroom.ratelimit import RateLimits
from liveroom.settings import Settings
from liveroom.store.base import made_list
from proxy.filters.screen import Screens, WordScreen

ROOM = "bench"
T = TypeVar("T")
LATIN_CHAT = ("what a great stream tonight", "hello everyone from berlin",
              "lol this is so funny i cannot stop laughing", "gg well played",
              "can you play that song again please", "first time here, love it")
CHINESE_CHAT = ("今天的直播真好看主播加油", "我们都支持你", "这首歌太好听了再来一遍",
                "第一次来这里，很喜欢", "主播晚上好呀")


def chat_bodies(rng: random.Random, screens: Screens) -> list[dict[str, str]]:
    """Bodies of 20 to 60 characters, Latin, Chinese and mixed, that hold no
    listed word (checked: made-up words can land in a line by chance)."""
    bodies: list[dict[str, str]] = []
    while len(bodies) < 64:
        kind = len(bodies) % 3
        parts = [rng.choice(LATIN_CHAT) if kind == 0 or (kind == 2 and rng.random() < 0.5)
                 else rng.choice(CHINESE_CHAT) for _ in range(3)]
        text = " ".join(parts)[:rng.randint(20, 60)].strip()
        if len(text) >= 20 and screens.screen(ROOM, text) is None:
            bodies.append({"text": text})
    return bodies


def per_call(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Best CPU µs per call of ``fn`` over ``rounds`` rounds of ``calls``."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - start)
    return best / calls * 1e6


def cycling(items: list[T], call: Callable[[T], object]) -> Callable[[], object]:
    """A call of ``call`` on the next of ``items`` each time."""
    index = [0]

    def step() -> object:
        i = index[0] = (index[0] + 1) % len(items)
        return call(items[i])

    return step


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def screening(args: argparse.Namespace) -> tuple[dict[str, float], list[dict[str, str]]]:
    rng = random.Random(args.seed)
    word_lists = [made_list(f"list{n}", "mask", made_up_words(args.words, rng))
                  for n in range(args.lists)]
    WordScreen(word_lists[0])  # the fold table filled, the allocator's arenas laid
    gc.collect()
    before = rss()
    start = time.process_time()
    built = [WordScreen(w) for w in word_lists]
    build_ms = (time.process_time() - start) * 1e3 / len(built)
    gc.collect()
    grown = (rss() - before) / len(built)
    first, *others = built
    one = Screens([first])
    bodies = chat_bodies(rng, Screens(built))
    elsewhere = Screens([WordScreen(made_list("there", "block", ["spam"], ["other-room"]))])
    calls, rounds = args.calls, args.rounds

    def screen(screens: Screens) -> float:
        return per_call(cycling(bodies, lambda b: screens.screen(ROOM, b)), calls, rounds)

    figures = {
        "screen, no list": screen(Screens()),
        "screen, lists of other rooms only": screen(elsewhere),
        f"screen, 1 list of {args.words}": screen(one),
    }
    for kind, lines in zip(("Latin", "Chinese", "mixed"), (bodies[0::3], bodies[1::3],
                                                          bodies[2::3]), strict=True):
        figures[f"screen, 1 list of {args.words}, {kind} lines only"] = per_call(
            cycling(lines, lambda b: one.screen(ROOM, b)), calls, rounds)
    figures[f"screen, 3 lists of {args.words}"] = screen(Screens([first, *others[:2]]))
    if args.lists > 3:
        figures[f"screen, {args.lists} lists of {args.words}"] = screen(
            Screens([first, *others]))
    word = word_lists[0].words[len(word_lists[0].words) // 2]
    hit = [{"text": f"{b['text'][:20]} {word.upper()} !"} for b in bodies]
    blocking = Screens([WordScreen(made_list("b", "block", word_lists[0].words))])
    figures[f"screen, a word of a block list of {args.words}"] = per_call(
        cycling(hit, lambda b: blocking.screen(ROOM, b)), calls, rounds)
    figures[f"screen, a word of a mask list of {args.words} (masked)"] = per_call(
        cycling(hit, lambda b: one.screen(ROOM, b)), calls, rounds)
    figures["build one list, ms"] = build_ms
    figures["one list's automaton, MB RSS"] = grown / 1e6
    return figures, bodies


async def sending(args: argparse.Namespace, bodies: list[dict[str, str]]) -> dict[str, float]:
    settings = Settings(admin_token="a", publisher_token="p", secret="s",
                        rate_limits=RateLimits(per_uid=()), rooms_per_uid=(),
                        rooms_per_address=(), rooms_per_node=())
    runner = node_runner(build_app(settings))
    await runner.setup()
    try:
        node = runner.app[NODE]
        sends = node.proxy.sends
        raws = [orjson.dumps({"uid": "fan", "body": b}) for b in bodies]

        def send(raw: bytes) -> object:
            reply = sends.send_at_once(ROOM, "application/json", raw, None, "", "127.0.0.1")
            assert reply is not None
            assert reply.status == 201, reply
            return reply

        calls = max(args.calls // 4, 1000)
        figures = {"send, no list": per_call(cycling(raws, send), calls, args.rounds)}
        words = made_up_words(args.words, random.Random(args.seed))
        await node.store.filters.put(made_list("chat", "mask", words), settings.filter_limits())
        await node.proxy.filters.refresh()
        assert node.proxy.filters.screens.of(ROOM)
        figures[f"send, 1 list of {args.words}"] = per_call(
            cycling(raws, send), calls, args.rounds)
        return figures
    finally:
        await runner.cleanup()


_SEND_PROBE = """
import asyncio, sys, time
sys.path.insert(0, sys.argv[1])
import orjson
from liveroom.node import NODE, build_app, node_runner
from liveroom.ratelimit import RateLimits
from liveroom.settings import Settings

async def probe(calls, rounds):
    settings = Settings(admin_token="a", publisher_token="p", secret="s",
                        rate_limits=RateLimits(per_uid=()), rooms_per_uid=(),
                        rooms_per_address=(), rooms_per_node=())
    runner = node_runner(build_app(settings))
    await runner.setup()
    try:
        sends = runner.app[NODE].proxy.sends
        raws = [orjson.dumps({"uid": "fan", "body": {"text": t}}) for t in sys.argv[4:]]
        best = float("inf")
        for _ in range(rounds):
            start = time.process_time()
            for i in range(calls):
                reply = sends.send_at_once("bench", "application/json", raws[i % len(raws)],
                                           None, "", "127.0.0.1")
                assert reply.status == 201, reply
            best = min(best, time.process_time() - start)
        print(best / calls * 1e6)
    finally:
        await runner.cleanup()

asyncio.run(probe(int(sys.argv[2]), int(sys.argv[3])))
"""
"""The in-process send with no list, run from the checkout its first argument
names (the calls, the rounds, then the bodies' texts)."""


def send_ab(base: str, runs: int, calls: int, rounds: int,
            bodies: list[dict[str, str]]) -> dict[str, list[float]]:
    """µs CPU per send, no list, of ``base``'s code and this checkout's, each
    in a fresh process, alternated ``runs`` times."""
    here = str(Path(__file__).resolve().parent.parent)
    texts = [b["text"] for b in bodies[:8]]
    found: dict[str, list[float]] = {base: [], here: []}
    for _ in range(runs):
        for tree in (base, here):
            out = subprocess.run([sys.executable, "-c", _SEND_PROBE, tree, str(calls),
                                  str(rounds), *texts], capture_output=True, text=True,
                                 check=True, timeout=300, cwd=tree)
            found[tree].append(float(out.stdout))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=10_000,
                        help="words a list holds (1 to 100 000) [10 000]")
    parser.add_argument("--lists", type=int, default=3,
                        help="global lists in the largest case (3 to 16) [3]")
    parser.add_argument("--calls", type=int, default=20_000,
                        help="calls a round (1 000 to 200 000) [20 000]")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, best kept (1 to 20) [5]")
    parser.add_argument("--seed", type=int, default=47, help="the made-up words' seed [47]")
    parser.add_argument("--base", metavar="DIR",
                        help="a checkout to A/B the send with no list against (see above)")
    parser.add_argument("--ab-runs", type=int, default=3,
                        help="alternated runs of the A/B (1 to 10) [3]")
    args = parser.parse_args(argv)
    if not (1 <= args.words <= 100_000 and 3 <= args.lists <= 16
            and 1000 <= args.calls <= 200_000 and 1 <= args.rounds <= 20
            and 1 <= args.ab_runs <= 10):
        parser.error("out of bounds: see --help")
    if args.base is not None and not (Path(args.base) / "liveroom" / "node.py").is_file():
        parser.error(f"--base {args.base}: no liveroom checkout there")
    figures, bodies = screening(args)
    figures.update(asyncio.run(sending(args, bodies)))
    lengths = [len(b["text"]) for b in bodies]
    print(f"$ {invocation('loadtest/bench_filter.py', argv)}")
    print(f"commit {commit()}; {versions()}")
    print(f"bodies: {len(bodies)} chat lines of {min(lengths)} to {max(lengths)} characters, "
          f"Latin, Chinese and mixed, none holding a listed word (but the two 'a word of' "
          f"cases)")
    for name, value in figures.items():
        unit = "" if name.endswith(("ms", "MB RSS")) else " µs CPU per call"
        print(f"{name:>52}: {value:8.2f}{unit}")
    if args.base is not None:
        runs = send_ab(args.base, args.ab_runs, max(args.calls // 4, 1000), args.rounds,
                       bodies)
        for tree, figures_of_tree in runs.items():
            shown = ", ".join(f"{f:.2f}" for f in figures_of_tree)
            print(f"send, no list, {tree}: {shown} µs CPU per call "
                  f"(median {statistics.median(figures_of_tree):.2f})")


if __name__ == "__main__":
    main()
