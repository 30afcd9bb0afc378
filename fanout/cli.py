"""Command-line plumbing shared by Starling's commands.

:func:`machine_output` keeps standard output for the one machine-readable
document a ``--json`` command prints. Everything else a process writes to
file descriptor 1 (progress lines, logging, ``print``, and above all what
Spark's JVM and its Python workers print, which inherit the descriptor and
can write after the command has finished) goes to standard error instead.
Redirecting the descriptor, not ``sys.stdout``, is what catches the child
processes.

:func:`interruptible` turns SIGTERM into :class:`Interrupted`, so a command
stopped by a supervisor unwinds like one stopped by Ctrl-C: cleanup runs
and a ``--json`` command still prints a complete document.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop (SIGINT or SIGTERM)."""


@contextlib.contextmanager
def machine_output(enabled: bool = True) -> Iterator[TextIO]:
    """Yield the stream the machine-readable document goes to.

    Enabled: the original standard output, while descriptor 1 (and so
    ``sys.stdout`` and every child process started meanwhile) points at
    standard error. Disabled: ``sys.stdout`` itself, nothing redirected.
    """
    if not enabled:
        yield sys.stdout
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    data = os.fdopen(os.dup(saved), "w", encoding="utf-8")
    try:
        yield data
    finally:
        data.flush()
        data.close()
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While active, SIGTERM raises :class:`Interrupted` in the main thread."""

    def stop(signum: int, _frame: Any) -> None:
        raise Interrupted(f"stopped by signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
