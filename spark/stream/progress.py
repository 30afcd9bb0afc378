"""One log line (and optionally one JSON line) per micro-batch of the job.

PySpark hands a Python listener each event converted field by field through
py4j: a few hundred calls into the JVM per micro-batch (every duration,
every RocksDB metric of the state operator, every source). On the driver of a
2-core machine that was most of the driver's Python time (py-spy during
``load_tests.bench_fanout``), beside the ``foreachBatch`` of the next batch.
:class:`ProgressLogger` is handed each event from its JSON instead: one call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from spark.stream.sink import FanoutSink

log = logging.getLogger("starling.fanout")


class ProgressLogger(StreamingQueryListener):
    """One line per micro-batch: rows in, mutations out, duration, lag."""

    def __init__(self, sink: FanoutSink, progress_file: Path | None = None) -> None:
        self.sink = sink
        self.progress_file = progress_file

    @property
    def _jlistener(self) -> Any:
        """The JVM's handle on this listener: PySpark's wrapper around
        :class:`_ProgressFromJson` instead of its field-by-field converter (the
        property PySpark's ``addListener`` reads; PySpark 4.3)."""
        if not hasattr(self, "_jlistenerobj"):
            jvm = SparkContext._jvm
            assert jvm is not None, "no SparkContext"
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_ProgressFromJson(self))
        return self._jlistenerobj

    def onQueryStarted(self, event: Any) -> None:
        log.info("fanout query started (id %s)", event.id)

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if log.isEnabledFor(logging.DEBUG):
            log.debug("progress %s", p.json)
        if p.numInputRows == 0 and self.sink.last.batch_id != p.batchId:
            return
        stats = self.sink.last.stats if self.sink.last.batch_id == p.batchId else {}
        behind = 0
        for source in p.sources:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                end, latest = json.loads(source.endOffset), json.loads(source.latestOffset)
                behind += sum(
                    int(o) - int(end.get(t, {}).get(part, 0))
                    for t, parts in latest.items()
                    for part, o in parts.items()
                )
        # The newest record's age when the batch's writes were done (visible to
        # readers), not when this listener is called, which is later by the
        # commit log and the listener bus.
        lag = self.sink.last.done_at - stats["ts"] / 1000 if stats.get("ts") else 0.0
        duration = p.durationMs.get("triggerExecution", 0) / 1000
        if self.progress_file is not None:
            record = {
                "batch": p.batchId,
                "at": time.time(),
                "rows": p.numInputRows,
                "duration": duration,
                "behind": behind,
                "lag": lag,
                # Where the trigger's time went, as Spark measured it (seconds):
                # addBatch (the join and the sink), walCommit, commitOffsets, ...
                "phases": {k: v / 1000 for k, v in p.durationMs.items()},
                **stats,
            }
            with self.progress_file.open("a") as out:
                out.write(json.dumps(record) + "\n")
        log.info(
            "batch %d: %d rows in, %d mutations, %d deliveries (%d new), %d dead letters, "
            "%.2fs (redis %.2fs), lag %d records / %.2fs",
            p.batchId,
            p.numInputRows,
            stats.get("mutations", 0),
            stats.get("deliveries", 0),
            stats.get("added", 0),
            stats.get("dead_letters", 0),
            duration,
            stats.get("redis_ms", 0) / 1000,
            behind,
            lag,
        )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("fanout query stopped: %s", event.exception.splitlines()[0])


class _ProgressFromJson:
    """The py4j callback the JVM calls: each progress event parsed from its
    JSON; the others (a few fields, once per query) as PySpark converts them."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self.listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        self.listener.onQueryIdle(QueryIdleEvent.fromJObject(jevent))

    def onQueryTerminated(self, jevent: Any) -> None:
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
