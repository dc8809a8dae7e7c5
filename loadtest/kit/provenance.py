"""What a benchmark's figures carry to be read later: the command, the commit, the machine.

Every report a benchmark prints (and its ``--json``) is stamped with
``invocation`` (the command line that ran it), ``commit`` (the checkout's short
hash, ``+dirty`` with uncommitted changes to tracked files) and ``versions``
(Python, cores, kernel and nginx): a figure in docs/performance.md names them.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys

from kit import REPO


def commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                              check=False).stdout.strip()

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def invocation(script: str, argv: list[str] | None) -> str:
    """The command line that ran ``script`` (``loadtest/NAME.py``) with
    ``argv`` (``None``: this process's arguments), for a report to carry."""
    return f"python {script} " + shlex.join(sys.argv[1:] if argv is None else argv)


def versions() -> str:
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True, check=False) \
        .stderr.strip().removeprefix("nginx version: ") if shutil.which("nginx") else "-"
    return (f"Python {platform.python_version()}, {os.cpu_count()} cores, "
            f"kernel {platform.release()}, {nginx}")
