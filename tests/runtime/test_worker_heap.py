"""spark.runtime.worker_heap: what a reused Spark worker freezes, and when.

Each scenario runs in a fresh interpreter: freezing and collector hooks are
process-wide, and pytest's own process must keep its collector as it was."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PRELUDE = """
import gc, os, weakref
from spark.runtime.worker_heap import spark_task, task_ended, task_started, worker_task

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

def frozen(obj):
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())

gc.collect()
gc.unfreeze()
"""


def run(body: str, *, reused: bool = True) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    if reused:
        env["SPARK_REUSE_WORKER"] = "1"
    script = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_what_outlives_a_task_is_frozen_and_what_the_task_left_is_collected() -> None:
    run("""
        kept = cycle()                  # a worker's import, client or cache
        spark_side = cycle()            # made for the task before Starling's code runs
        dropped = weakref.ref(spark_side)
        with worker_task():
            during = cycle()
            gc.collect()                # a collection inside the task freezes nothing
            assert gc.get_freeze_count() == 0
        del spark_side, during          # the task is over: its objects are garbage
        gc.collect()                    # the daemon's, between two tasks
        assert dropped() is None, "a task's cyclic garbage was frozen"
        assert frozen(kept) and gc.get_freeze_count() > 0
        later = cycle()                 # imported by a later task: frozen after it
        with worker_task():
            pass
        gc.collect()
        assert frozen(later)
        """)


def test_a_spark_task_generator_is_a_task_from_its_first_step_to_its_last() -> None:
    run("""
        @spark_task
        def rows(n):
            yield from range(n)

        kept = cycle()
        it = rows(2)
        assert next(it) == 0
        gc.collect()                    # between two steps: still inside the task
        assert gc.get_freeze_count() == 0
        assert list(it) == [1]
        gc.collect()
        assert frozen(kept)
        """)


def test_a_task_runs_without_automatic_collections_and_the_collector_resumes_after() -> None:
    run("""
        with worker_task():
            with worker_task():         # nested: still one task in progress
                assert not gc.isenabled()
            assert not gc.isenabled()
            left = weakref.ref(cycle())
            hold = [[] for _ in range(100_000)]  # would trigger collections
            assert left() is not None
        assert gc.isenabled()
        gc.collect()                    # the daemon's, after the task
        assert left() is None
        gc.disable()                    # a worker whose collector was off keeps it off
        with worker_task():
            pass
        assert not gc.isenabled()
        """)


def test_outside_a_reused_worker_the_collector_is_left_alone() -> None:
    run(
        """
        with worker_task():
            assert gc.isenabled()
        """,
        reused=False,
    )


def test_a_task_that_never_ends_stops_the_freezing() -> None:
    run("""
        task_started()
        task_started()
        task_ended()
        gc.collect()
        assert gc.get_freeze_count() == 0
        """)


def test_outside_a_reused_worker_nothing_changes() -> None:
    run(
        """
        with worker_task():
            pass
        gc.collect()
        assert gc.get_freeze_count() == 0 and not gc.callbacks
        """,
        reused=False,
    )


def test_a_paused_collector_resumes_as_it_was_and_collects_what_the_pause_left() -> None:
    run(
        """
        from spark.runtime.worker_heap import collector_paused

        def allocate():
            return [[] for _ in range(100_000)]  # enough to trigger collections

        gone = weakref.ref(cycle())
        hold = allocate()
        assert gone() is None  # collected by an automatic collection
        with collector_paused():
            assert not gc.isenabled()
            kept = weakref.ref(cycle())
            hold = allocate()
            assert kept() is not None  # no automatic collection
            left = weakref.ref(cycle())
            gc.collect(0)  # an explicit one still runs
            assert left() is None
        assert gc.isenabled()
        gc.collect()
        assert kept() is None

        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()  # it was off: it stays off
        """
    )
