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

:func:`freeze_heap`, called as a task starts, freezes what is alive then
(``gc.freeze``): the imports, the clients, the caches. Later collections
leave those out (~30 ms -> well under 1 ms) and still collect what tasks
allocate. A frozen object is still freed when its last reference goes; only
a reference cycle among objects alive at a freeze would stay. Only in a
reused worker (the daemon says so with ``SPARK_REUSE_WORKER``): a test
process calling the join directly keeps its collector as it was.
"""

from __future__ import annotations

import gc
import os

from fanout.procs import per_process


@per_process
def _first_collection() -> None:
    """One full collection per process, before its first freeze: no garbage
    goes into the frozen generation."""
    gc.collect()


def freeze_heap() -> None:
    """In a reused Spark worker, freeze the objects alive now (a task is starting)."""
    if not os.environ.get("SPARK_REUSE_WORKER"):
        return
    _first_collection()
    gc.freeze()
