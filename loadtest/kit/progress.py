"""The lines a benchmark prints while it runs, so a long run shows where it is."""

from __future__ import annotations

import time


def say(server: str, phase: str, text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {server:14} {phase:8} {text}", flush=True)
