"""Rebuilds run by the fanout job, on the SparkSession it already has.

A rebuild that starts a Spark of its own spends much of its time warming up:
the JVM starts and compiles Spark's code paths, the data source's Python
processes start and import their modules. The fanout job's session has done
all that long ago, and a rebuild run there takes about a third less time
(docs/performance.md). So ``manage.py rebuild_timelines`` asks the running job
for the Spark stages, through Redis:

1. the job announces itself (:data:`fanout.keys.FANOUT_JOB`, renewed five
   times a second, expiring after :data:`ANNOUNCE_TTL`);
2. the command posts a request (:data:`fanout.keys.REBUILD_REQUEST`): one at
   a time; it expires :data:`REQUEST_TTL` seconds after the command last
   renewed it, so a command that died does not leave a rebuild running;
3. the job claims it, runs :class:`spark.rebuild.Rebuild` up to a verified
   generation (snapshot, read, join, write, lengths) in a thread of its own,
   its Spark jobs in job groups beside the streaming query's, and writes its
   progress lines to :data:`fanout.keys.REBUILD_LOG` and its summary to the
   rebuild's status hash;
4. the command prints those lines as they come, then compares the sample
   with its database and hands the generation over (spark.rebuild_finish):
   the job restarts its query on it, as after any rebuild.

If the request disappears (the command was stopped, or died), the job
cancels the rebuild's Spark jobs and deletes the half-built generation. A
rebuild that fails leaves the streaming query running. With no job
announced, or one that does not claim the request within :data:`CLAIM_WAIT`
seconds, the command runs the rebuild on a Spark of its own, as it does
with ``--standalone``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import redis
from pyspark.sql import SparkSession

from fanout.config import StarlingConfig
from fanout.timelines import TimelineStore
from spark.rebuild import Rebuild, default_state_root
from spark.rebuild_finish import Conclusion, Oracle, RebuildFailed, Settled, reason_of
from spark.rebuild_report import Progress, Summary

log = logging.getLogger("starling.rebuild")

#: How often the job renews its announcement and looks for requests (seconds):
#: a rebuild waits for this long at most before it starts.
ANNOUNCE_EVERY = 0.2
#: A job that has not renewed its announcement for this long is gone.
ANNOUNCE_TTL = 10.0
#: A request its command has not renewed for this long is withdrawn.
REQUEST_TTL = 30.0
#: How long the command waits for the job to claim its request.
CLAIM_WAIT = 15.0
#: Who claims a request to run it in the fanout job.
JOB = "job"
#: The states of a rebuild run by the job, as its status hash says them.
BUILT, SUCCEEDED, FAILED = "built", "succeeded", "failed"


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
        self.about = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        self.running: Rebuild | None = None
        self.request_id = ""
        #: A generation built for the current request, until its command has
        #: handed it over, or else it is deleted.
        self.built: int | None = None
        self.worker: threading.Thread | None = None
        self._thread = threading.Thread(target=self._loop, name="rebuild-service", daemon=True)

    def start(self) -> RebuildService:
        self._thread.start()
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
        if self.running is not None and self.worker is not None and self.worker.is_alive():
            log.warning("the job is stopping: cancelling rebuild %s", self.request_id)
            self.running.cancel("the fanout job is stopping")

    def tick(self) -> None:
        """Announce the job; cancel a rebuild whose request is gone; start a new one."""
        self.store.announce_fanout_job(self.about, ANNOUNCE_TTL)
        request = self.store.rebuild_request()
        withdrawn = request is None or request.get("id") != self.request_id
        if self.worker is not None and self.worker.is_alive():
            if withdrawn and self.running:
                log.warning("rebuild %s: its request was withdrawn; cancelling", self.request_id)
                self.running.cancel("its command stopped")
                self.running = None
            return
        if withdrawn and self.built is not None:
            self.abandoned(self.built)
            self.built = None
        if request is None or request.get("id") == self.request_id:
            return
        if not self.store.claim_rebuild_request(str(request["id"]), JOB):
            return
        self.request_id = str(request["id"])
        # The job clears the last rebuild's status, not the command: a command
        # whose request is refused must not wipe the running one's.
        self.store.clear_rebuild_status()
        self.running = self.prepare(request)
        self.worker = threading.Thread(
            target=self.run, args=(self.running, request), name="rebuild", daemon=True
        )
        self.worker.start()

    def abandoned(self, generation: int) -> None:
        """The command that asked for ``generation`` ended without handing it
        over (it was stopped, or died): nothing else would delete it."""
        if self.store.generation_meta(generation).get("state") == "building":
            log.warning(
                "rebuild %s: generation %d was never handed over; deleting it",
                self.request_id,
                generation,
            )
            self.store.drop_generation(generation)

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
        )

    def run(self, rebuild: Rebuild, request: dict[str, Any]) -> None:
        """One rebuild, to the end; whatever happens, the streaming query goes on."""
        dry_run = bool(request.get("dry_run"))
        log.info("rebuild %s asked by %s", request["id"], request.get("by", "?"))
        rebuild.progress.publish(state="running", runner="fanout job", request=request["id"])
        try:
            summary = rebuild.run(dry_run=dry_run, wait=0)
        except Exception as exc:
            reason = reason_of(exc)[:500]
            if rebuild.cancelled:
                reason = f"cancelled: {rebuild.cancelled}"
            log.warning("rebuild %s failed: %s", request["id"], reason)
            log.debug("rebuild failed", exc_info=True)
            rebuild.progress.publish(state=FAILED, error=reason, finished_at=time.time())
            return
        self.built = summary.generation
        rebuild.progress.publish(
            state=SUCCEEDED if dry_run else BUILT,
            summary=orjson.dumps(asdict(summary)),
            sample=orjson.dumps(rebuild.sampled),
        )


# --- the command's side -----------------------------------------------------------------


def run_in_job(
    store: TimelineStore,
    config: StarlingConfig,
    progress: Progress,
    *,
    dry_run: bool,
    sample: int,
    wait: float,
    state_dir: Path | None,
    oracle: Oracle | None,
    settled: Settled | None,
) -> Summary | None:
    """Ask the running fanout job for the rebuild and see it through (sample
    check, hand-over); None if the job did not take it (the caller runs it
    itself). Stopping this (Ctrl-C) withdraws the request: the job cancels."""
    request_id = uuid.uuid4().hex
    request = {
        "id": request_id,
        "dry_run": dry_run,
        "sample": sample,
        "state_dir": str(state_dir) if state_dir else None,
        "asked_at": time.time(),
        "by": f"{socket.gethostname()}:{os.getpid()}",
    }
    if not store.request_rebuild(request, REQUEST_TTL):
        raise RebuildFailed("another rebuild is running; wait for it to end")
    try:
        progress.stage("asking the fanout job to run the rebuild on its Spark session")
        if not _claimed(store, request_id):
            progress.done("it did not answer: running the rebuild here")
            return None
        progress.done("the job runs it")
        status = _follow(store, progress, request_id)
        if status.get("state") == FAILED:
            raise RebuildFailed(status.get("error") or "the fanout job's rebuild failed")
        summary = Summary(**orjson.loads(status["summary"]))
        summary.ran_in = "the fanout job"
        if not dry_run:
            assert summary.generation is not None
            finish = Conclusion(config, store, progress, summary, oracle, settled)
            finish.conclude(summary.generation, orjson.loads(status.get("sample", "[]")), wait)
        summary.stages = {**summary.stages, **progress.durations}
        summary.seconds = progress.elapsed()
        return summary
    finally:
        store.end_rebuild_request(request_id)


def _claimed(store: TimelineStore, request_id: str) -> bool:
    """True once the job has taken the request; False if it has not within
    :data:`CLAIM_WAIT` seconds and the command has taken it back."""
    deadline = time.monotonic() + CLAIM_WAIT
    while time.monotonic() < deadline:
        if store.rebuild_claimed_by(request_id) == JOB:
            return True
        time.sleep(0.1)
    # Taken back by the command, unless the job took it a moment ago.
    return not store.claim_rebuild_request(request_id, "command")


def _follow(store: TimelineStore, progress: Progress, request_id: str) -> dict[str, str]:
    """Print the job's progress lines until it has finished; its final status.
    Only a status naming ``request_id`` counts: until the job has cleared the
    last rebuild's, that one is still there."""
    shown, renewed, last_seen = 0, 0.0, time.monotonic()
    claimed = time.monotonic()
    while True:
        if time.monotonic() - renewed > 1.0:
            if not store.renew_rebuild_request(request_id, REQUEST_TTL):
                raise RebuildFailed("the rebuild's request disappeared from Redis")
            renewed = time.monotonic()
            if store.fanout_job() is not None:
                last_seen = renewed
            elif renewed - last_seen > ANNOUNCE_TTL:
                raise RebuildFailed("the fanout job stopped during the rebuild")
        status = store.rebuild_status()
        if status.get("request") != request_id:
            if time.monotonic() - claimed > ANNOUNCE_TTL:
                raise RebuildFailed("the fanout job took the rebuild but does not report on it")
            time.sleep(0.1)
            continue
        lines = store.rebuild_log(shown)
        for line in lines:
            print(line, file=progress.out, flush=True)
        shown += len(lines)
        # The job publishes its final state after its last line, and the lines
        # are read after the status: they are all printed by now.
        if status.get("state") in (BUILT, SUCCEEDED, FAILED):
            return status
        time.sleep(0.2)
