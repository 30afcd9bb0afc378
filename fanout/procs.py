"""One instance per process: the cache every long-lived client goes through.

Network clients (Redis pools, Kafka producers and consumers, admin clients)
and per-process state (the id generator) must not cross a ``fork``: a
pre-forking server (granian, Celery's prefork pool, Spark's Python worker
daemon) would otherwise share one socket between processes.
:func:`per_process` caches a factory's results by argument and starts an
empty cache in the child after every fork.

The parent's instances are not destroyed in the child, only set aside: a
fork may be the first half of ``subprocess`` (with ``preexec_fn``, hooks run
before ``exec``), and destroying a Kafka client there, whose threads did not
come along, crashes the child.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: Caches of the parent process, kept alive (never used) in a forked child.
_SET_ASIDE: list[Any] = []


def per_process(factory: Callable[P, R]) -> Callable[P, R]:
    """``factory(*args)`` made once per process and argument tuple (thread-safe)."""
    state: list[Any] = [{}, threading.Lock()]

    def forget() -> None:  # in a forked child: nothing of the parent's, a fresh lock
        _SET_ASIDE.append(state[0])
        state[0], state[1] = {}, threading.Lock()

    os.register_at_fork(after_in_child=forget)

    @functools.wraps(factory)
    def get(*args: P.args, **kwargs: P.kwargs) -> R:
        key = (args, tuple(sorted(kwargs.items())))
        cache: dict[Any, R] = state[0]
        try:
            return cache[key]
        except KeyError:
            pass
        with state[1]:
            cache = state[0]
            if key not in cache:
                cache[key] = factory(*args, **kwargs)
            return cache[key]

    return get
