"""Rebuilds run by the fanout job, on the SparkSession it already has.

A rebuild that starts a Spark of its own spends much of its time warming up:
the JVM starts and compiles Spark's code paths, the data source's Python
processes start and import their modules. The fanout job's session has done
all that long ago, and a rebuild run there takes about a third less time
(docs/performance.md). So ``manage.py rebuild_timelines`` asks the running job
for the Spark stages, through Redis:

1. the job announces itself (:data:`fanout.store.keys.FANOUT_JOB`, renewed five
   times a second, expiring after :data:`ANNOUNCE_TTL`);
2. the command posts a request (:data:`fanout.store.keys.REBUILD_REQUEST`): one at
   a time, also for a command that runs the rebuild itself; a thread of
   the command renews it until the command ends, and it expires a while
   after the last renewal, so a command that died does not leave a rebuild
   running (the command's side is spark.rebuild.request);
3. the job claims it, runs :class:`spark.rebuild.stages.Rebuild` up to a verified
   generation (snapshot, read, join, write, lengths) in a thread of its own,
   its Spark jobs in job groups beside the streaming query's, and writes its
   progress lines to :data:`fanout.store.keys.REBUILD_LOG` and its summary to the
   rebuild's status hash;
4. the command prints those lines as they come, then compares the sample
   with its database and hands the generation over (spark.rebuild.finish):
   the job restarts its query on it, as after any rebuild.

If the request disappears (the command was stopped, or died), the job
cancels the rebuild's Spark jobs and deletes the half-built generation, or
the built one its command did not hand over (a compare-and-set on the
generation's state: it is handed over or deleted, never both). The job
announces the request it is running, so a command whose job restarted
gives up instead of waiting; the restarted job deletes what the earlier
run left half-built, once that run no longer announces itself. A rebuild
that fails leaves the streaming query running. With no job announced, or
one that does not claim the request in time, the command runs the rebuild
on a Spark of its own, as it does with ``--standalone``.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import redis
from pyspark.sql import SparkSession

from fanout.config import StarlingConfig
from fanout.store.generations import GenerationState
from fanout.store.rebuilds import RebuildState
from fanout.store.timelines import TimelineStore
from spark.rebuild.finish import discard_generation, drop_built, reason_of
from spark.rebuild.report import Progress
from spark.rebuild.stages import Rebuild, default_state_root

log = logging.getLogger("starling.rebuild")

#: How often the job renews its announcement and looks for requests (seconds):
#: a rebuild waits for this long at most before it starts.
ANNOUNCE_EVERY = 0.2
#: A job that has not renewed its announcement for this long is gone.
ANNOUNCE_TTL = 10.0
#: Who claims a request: the fanout job, to run it; its command, to run it itself.
JOB, COMMAND = "job", "command"
#: The generation metadata (``built_by``) of one the job builds.
BUILT_BY_JOB = "fanout job"
#: How long a failed deletion waits before it is tried again (seconds).
CLEANUP_RETRY = 5.0
#: How often the job looks for generations another run left behind (seconds).
SWEEP_EVERY = 60.0


class RedisLines:
    """A text stream (what :class:`Progress` prints to) whose lines go to the
    rebuild's log in Redis and to the job's own log."""

    def __init__(self, store: TimelineStore) -> None:
        self.store = store
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            log.info("rebuild: %s", line)
            try:
                self.store.log_rebuild(line)
            except redis.RedisError:
                log.debug("could not publish a progress line", exc_info=True)
        return len(text)

    def flush(self) -> None:
        pass


# --- the job's side ---------------------------------------------------------------------


class RebuildService:
    """The fanout job's thread that takes rebuild requests and runs them."""

    def __init__(
        self,
        spark: SparkSession,
        config: StarlingConfig,
        store: TimelineStore,
        stopping: threading.Event,
    ) -> None:
        self.spark = spark
        self.config = config
        self.store = store
        self.stopping = stopping
        #: What the job announces; ``running`` names the request it is running.
        self.about: dict[str, Any] = {
            "instance": uuid.uuid4().hex,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
        }
        self.running: Rebuild | None = None
        self.request_id = ""
        #: A generation built for the current request, until its command has
        #: handed it over, or else it is deleted.
        self.built: int | None = None
        self.worker: threading.Thread | None = None
        #: When the next sweep is due (monotonic seconds; the first at once).
        self.sweep_due = 0.0
        self.sweeping = threading.Event()  # a sweep waits in, or runs from, the cleanup queue
        #: Deletions, done apart: a large generation takes a while to delete,
        #: and the job must go on announcing itself and taking requests.
        self.cleanup: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="rebuild-service", daemon=True)
        self._cleaner = threading.Thread(target=self._clean, name="rebuild-cleanup", daemon=True)

    def start(self) -> RebuildService:
        self._thread.start()
        self._cleaner.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Cancel a rebuild in progress (its generation is deleted) and wait for it."""
        self.stopping.set()
        self._thread.join(timeout)
        if self.worker is not None:
            self.worker.join(timeout)

    def _loop(self) -> None:
        said = False
        while True:
            try:
                self.tick()
                said = False
            except redis.RedisError as exc:
                if not said:
                    log.warning("rebuild requests: Redis unavailable (%s)", exc)
                said = True
            except Exception:
                log.exception("rebuild requests: unexpected error")
            if self.stopping.wait(ANNOUNCE_EVERY):
                break
        while self.busy():
            assert self.running is not None
            if not self.running.cancelled:
                log.warning("the job is stopping: cancelling rebuild %s", self.request_id)
            self.running.cancel("the fanout job is stopping")
            if self.worker is not None:
                self.worker.join(ANNOUNCE_EVERY)

    def _clean(self) -> None:
        while not self.stopping.is_set():
            try:
                task = self.cleanup.get(timeout=ANNOUNCE_EVERY)
            except queue.Empty:
                continue
            try:
                task()
            except Exception as exc:
                log.warning("rebuild cleanup failed (%s); trying again", exc)
                log.debug("rebuild cleanup failed", exc_info=True)
                self.stopping.wait(CLEANUP_RETRY)
                self.cleanup.put(task)

    def busy(self) -> bool:
        return self.worker is not None and self.worker.is_alive()

    def announce(self) -> None:
        running = self.request_id if self.busy() else None
        self.store.announce_fanout_job({**self.about, "running": running}, ANNOUNCE_TTL)

    def tick(self) -> None:
        """Announce the job; cancel a rebuild whose request is gone; start a new one."""
        self.announce()
        if time.monotonic() >= self.sweep_due and not self.sweeping.is_set():
            self.sweeping.set()
            self.cleanup.put(self.sweep)  # tried again until it has run
        request = self.store.rebuild_request()
        withdrawn = request is None or request.get("id") != self.request_id
        if self.busy():
            if withdrawn and self.running is not None:
                # Again on every tick until the worker ends: a cancel stops only
                # the Spark jobs running at that moment.
                if not self.running.cancelled:
                    log.warning(
                        "rebuild %s: its request was withdrawn; cancelling", self.request_id
                    )
                self.running.cancel("its command stopped")
            return
        if withdrawn and self.built is not None:
            self.cleanup.put(partial(self.abandoned, self.built, self.request_id))
            self.built = None
        if request is None or request.get("id") == self.request_id:
            return
        if not self.store.claim_rebuild_request(str(request["id"]), JOB):
            return
        self.request_id = str(request["id"])
        try:
            # The job clears the last rebuild's status, not the command: a
            # command whose request is refused must not wipe the running one's.
            self.store.clear_rebuild_status()
            self.running = self.prepare(request)
        except Exception as exc:
            self.store.publish_rebuild_status(
                state=RebuildState.FAILED, request=self.request_id, error=reason_of(exc)[:500]
            )
            raise
        self.worker = threading.Thread(
            target=self.run, args=(self.running, request), name="rebuild", daemon=True
        )
        self.worker.start()
        self.announce()  # now naming the request: its command follows that

    def abandoned(self, generation: int, request_id: str) -> None:
        """The command that asked for ``generation`` ended without handing it
        over (it was stopped, or died): nothing else would delete it."""
        if drop_built(self.store, generation):
            log.warning(
                "rebuild %s: generation %d was never handed over; deleted it",
                request_id,
                generation,
            )

    def sweep(self) -> None:
        """Delete the generations another run of the job was building, or had
        built, for a command that never handed them over (that job stopped or
        died in between, and forgot them), and finish deletions that stopped
        half-way. A job still announcing itself (one that runs beside this one
        for a while, as in a rolling restart) keeps what it builds; once it
        is gone, a later sweep (every :data:`SWEEP_EVERY` seconds) deletes it."""
        found = self.store.generations("built_by", "instance")
        for generation, meta in found.items():
            state = meta["state"]
            builder = meta.get("instance", "")
            if state == GenerationState.DROPPING:
                discard_generation(self.store, generation)
                log.warning("generation %d: finished deleting it", generation)
            elif (
                state == GenerationState.BUILDING
                and meta.get("built_by") == BUILT_BY_JOB
                and builder != self.about["instance"]
                and not self.store.fanout_instance_alive(builder)
                and drop_built(self.store, generation)
            ):
                log.warning("generation %d: left half-built by another run; deleted", generation)
        self.sweep_due = time.monotonic() + SWEEP_EVERY
        self.sweeping.clear()

    def prepare(self, request: dict[str, Any]) -> Rebuild:
        progress = Progress(self.store, RedisLines(self.store))
        # The lines' clock starts when the command asked, as its own lines' does.
        progress.started -= max(0.0, time.time() - float(request.get("asked_at", time.time())))
        state_dir = request.get("state_dir")
        return Rebuild(
            self.spark,
            self.config,
            self.store,
            progress,
            Path(state_dir) if state_dir else default_state_root(),
            sample=int(request.get("sample", 0)),
            build_only=True,
            generation_meta={
                "built_by": BUILT_BY_JOB,
                "instance": self.about["instance"],
                "request": str(request["id"]),
            },
        )

    def run(self, rebuild: Rebuild, request: dict[str, Any]) -> None:
        """One rebuild, to the end; whatever happens, the streaming query goes on."""
        dry_run = bool(request.get("dry_run"))
        log.info("rebuild %s asked by %s", request["id"], request.get("by", "?"))
        rebuild.progress.publish(
            state=RebuildState.RUNNING, runner="fanout job", request=request["id"]
        )
        try:
            summary = rebuild.run(dry_run=dry_run, wait=0)
        except Exception as exc:
            reason = reason_of(exc)[:500]
            if rebuild.cancelled:
                reason = f"cancelled: {rebuild.cancelled}"
            log.warning("rebuild %s failed: %s", request["id"], reason)
            log.debug("rebuild failed", exc_info=True)
            rebuild.progress.publish(
                state=RebuildState.FAILED, error=reason, finished_at=time.time()
            )
            return
        self.built = summary.generation
        rebuild.progress.publish(
            state=RebuildState.SUCCEEDED if dry_run else RebuildState.BUILT,
            summary=orjson.dumps(asdict(summary)),
            sample=orjson.dumps(rebuild.sampled),
        )
