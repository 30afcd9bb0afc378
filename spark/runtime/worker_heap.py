"""Spare Spark's reused Python workers a full garbage collection per task.

A reused Python worker (``spark.python.worker.reuse``, on here) runs
``gc.collect()`` after every task it serves (PySpark's ``daemon.py``). A worker
that has imported PySpark, pyarrow, pandas and Starling's modules tracks
about 100,000 objects, so each of those collections costs ~30 ms of CPU, and
a micro-batch of the fanout job runs six Python tasks: the source's reads,
the join, the sink. Measured with py-spy at 1,000 tweets/s on two cores, it
was the Python workers' largest single cost, larger than the join and the
Redis writes together; and a worker still collecting is one the next task
waits for.

Starling's tasks say when they start and end: the functions Spark runs
over a partition are :func:`spark_task` generators, and the join calls
:func:`task_started` and :func:`task_ended` from its ``init`` and ``close``.
The first task in a worker adds a hook to the collector that runs after each
full collection: when no task is in progress, that is the daemon's collection
between two tasks, and the hook freezes what survived it (``gc.freeze``). Those
objects are what the worker keeps between tasks (the imports, the clients,
the caches); later collections skip them (~30 ms -> well under 1 ms), and
modules a later task imports are frozen after that task. A task's own
objects are never frozen, so everything it leaves behind is collected as
before, by that same collection after the task: while a task runs, the
collector's automatic collections are paused (each would walk the task's
growing heap of records and find almost nothing to free; measured in
``load_tests.bench_fanout --authors uniform``, two pairs of runs: micro-batch
p50 1.59/1.62 s -> 1.41/1.36 s, end-to-end / script 0.23/0.28 -> 0.33/0.34
on a slow day). Only in a reused worker (the daemon says so with
``SPARK_REUSE_WORKER``): a test process calling the join directly keeps its
collector as it was.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: Starling tasks in progress in this process (one at a time in a Spark worker).
_running = 0
#: Whether the collector ran automatically before the first task in progress.
_collecting = True


def task_started() -> None:
    """A task of the job starts in this process: its objects are not to be frozen."""
    global _running, _collecting
    if not os.environ.get("SPARK_REUSE_WORKER"):
        return
    if _freeze_after_collection not in gc.callbacks:
        gc.callbacks.append(_freeze_after_collection)
    if _running == 0:
        _collecting = gc.isenabled()
        gc.disable()  # the daemon's collection after the task does the collecting
    _running += 1


def task_ended() -> None:
    """The task :func:`task_started` announced is done."""
    global _running
    if _running == 0:
        return
    _running -= 1
    if _running == 0 and _collecting:
        gc.enable()


@contextmanager
def worker_task() -> Iterator[None]:
    """The body of a task (see :func:`task_started`)."""
    task_started()
    try:
        yield
    finally:
        task_ended()


def spark_task(fn: Callable[P, Iterator[T]]) -> Callable[P, Iterator[T]]:
    """``fn``, a generator Spark runs over a partition (``mapInArrow``, a data
    source's read), as a task from its first step to its last."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        with worker_task():
            yield from fn(*args, **kwargs)

    return run


def _freeze_after_collection(phase: str, info: dict[str, Any]) -> None:
    """After a full collection outside any task (the daemon's, between two
    tasks), freeze the survivors. A stray count left by a task that never
    ended only stops the freezing and leaves the automatic collections
    paused: the daemon's collection after each task still frees the garbage."""
    if phase == "stop" and info["generation"] == 2 and _running == 0:
        gc.freeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection for a while: for a task that builds a large
    heap without reference cycles (the rebuild's read holds a partition's
    newest records, a million tuples and lists). Every collection the
    allocations would trigger walks that growing heap and finds nothing to
    free: measured on a partition of 989,740 follows, reading it took 8.8 s
    of CPU with the collector and 4.7 s without. Reference counting still
    frees everything as it goes; cycles made meanwhile wait for the next
    collection after the pause."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
