"""The command's side of a rebuild the fanout job runs (spark.rebuild.service):
it posts the request, keeps it alive while the command runs, follows the
job's progress and finishes the rebuild (sample check, hand-over).

Every rebuild posts a request, also one the command runs itself, so that
only one runs at a time: :func:`ask` posts it, :class:`Renewal` keeps it
alive for as long as the command runs, and withdraws it at the end.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import orjson
import redis

from fanout.config import StarlingConfig
from fanout.store.rebuilds import RebuildState
from fanout.store.timelines import TimelineStore
from spark.rebuild.finish import Conclusion, Oracle, RebuildFailed, Settled
from spark.rebuild.report import Progress, Summary
from spark.rebuild.service import ANNOUNCE_TTL, COMMAND, JOB

log = logging.getLogger("starling.rebuild")

#: A request its command has not renewed for this long is withdrawn.
REQUEST_TTL = 30.0
#: How long the command waits for the job to claim its request.
CLAIM_WAIT = 15.0
#: How often the command renews its request (seconds).
RENEW_EVERY = 1.0
#: How long the job may announce that it is not running the command's
#: request, its status not final, before the command gives up on it (the job
#: restarted, or its last report was lost): a few of the job's announcements.
NOT_RUNNING_GRACE = 2.0
FINAL = (RebuildState.BUILT, RebuildState.SUCCEEDED, RebuildState.FAILED)


class Renewal:
    """Keeps the command's request alive, from a thread, for as long as the
    command is at it: following the job, checking the sample, waiting for the
    switch. While it lives no other rebuild can be asked for, and the job
    keeps what it built for it."""

    def __init__(self, store: TimelineStore, request_id: str) -> None:
        self.store = store
        self.request_id = request_id
        #: Set when the request was found gone (expired, or deleted).
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rebuild-renewal", daemon=True)

    def __enter__(self) -> Renewal:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.store.end_rebuild_request(self.request_id)
        except redis.RedisError:  # it expires by itself; the error that ended us matters more
            log.warning("could not withdraw rebuild request %s", self.request_id, exc_info=True)

    def _loop(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            try:
                if not self.store.renew_rebuild_request(self.request_id, REQUEST_TTL):
                    self.lost.set()
                    return
            except redis.RedisError:
                log.debug("could not renew the rebuild's request", exc_info=True)


class RebuildBusy(RebuildFailed):
    """Another rebuild is running: nothing was started."""


def ask(
    store: TimelineStore,
    *,
    dry_run: bool,
    sample: int,
    state_dir: Path | None,
    for_job: bool,
) -> Renewal:
    """Post the command's rebuild request, the one at a time (as a context
    manager that keeps it alive and withdraws it at the end). ``for_job``:
    the job may take it; otherwise the command has taken it itself, before
    posting it, so the job leaves it alone."""
    request_id = uuid.uuid4().hex
    request = {
        "id": request_id,
        "dry_run": dry_run,
        "sample": sample,
        "state_dir": str(state_dir) if state_dir else None,
        "asked_at": time.time(),
        "by": f"{socket.gethostname()}:{os.getpid()}",
    }
    if not for_job:
        store.claim_rebuild_request(request_id, COMMAND)
    if not store.request_rebuild(request, REQUEST_TTL):
        raise RebuildBusy(
            "another rebuild is running (or was stopped less than "
            f"{REQUEST_TTL:.0f}s ago); wait for it to end"
        )
    return Renewal(store, request_id)


def run_in_job(
    store: TimelineStore,
    config: StarlingConfig,
    progress: Progress,
    renewal: Renewal,
    *,
    dry_run: bool,
    wait: float,
    oracle: Oracle | None,
    settled: Settled | None,
) -> Summary | None:
    """Have the running fanout job run the rebuild asked for (:func:`ask`) and
    see it through (sample check, hand-over); None if the job did not take it
    (the caller runs it itself). Stopping this (Ctrl-C) ends the request: the
    job cancels."""
    progress.stage("asking the fanout job to run the rebuild on its Spark session")
    if not _claimed(store, renewal.request_id):
        progress.done("it did not answer: running the rebuild here")
        return None
    progress.done("the job runs it")
    status = _follow(store, progress, renewal)
    if status.get("state") == RebuildState.FAILED:
        raise RebuildFailed(status.get("error") or "the fanout job's rebuild failed")
    summary = Summary(**orjson.loads(status["summary"]))
    summary.ran_in = "the fanout job"
    if not dry_run:
        assert summary.generation is not None
        finish = Conclusion(config, store, progress, summary, oracle, settled, deletes_failed=False)
        finish.conclude(summary.generation, orjson.loads(status.get("sample", "[]")), wait)
    summary.stages = {**summary.stages, **progress.durations}
    summary.seconds = progress.elapsed()
    return summary


def _claimed(store: TimelineStore, request_id: str) -> bool:
    """True once the job has taken the request; False if it has not within
    :data:`CLAIM_WAIT` seconds and the command has taken it back."""
    deadline = time.monotonic() + CLAIM_WAIT
    while time.monotonic() < deadline:
        if store.rebuild_claimed_by(request_id) == JOB:
            return True
        time.sleep(0.1)
    # Taken back by the command, unless the job took it a moment ago.
    return not store.claim_rebuild_request(request_id, COMMAND)


def _follow(store: TimelineStore, progress: Progress, renewal: Renewal) -> dict[str, str]:
    """Print the job's progress lines until it has finished; its final status.
    Only a status naming the request counts: until the job has cleared the
    last rebuild's, that one is still there. Gives up when the request is
    gone, when no job has been announced for :data:`ANNOUNCE_TTL`, or when the
    announced job is not running the request (it restarted, or its final
    status was lost) for :data:`NOT_RUNNING_GRACE`."""
    request_id = renewal.request_id
    shown = 0
    last_seen = time.monotonic()
    not_running: float | None = None
    while True:
        if renewal.lost.is_set():
            raise RebuildFailed("the rebuild's request disappeared from Redis")
        # The announcement before the status: the job writes the final status
        # before it stops naming the request.
        job = store.fanout_job()
        status = store.rebuild_status()
        now = time.monotonic()
        if status.get("request") == request_id:
            lines = store.rebuild_log(shown)
            for line in lines:
                print(line, file=progress.out, flush=True)
            shown += len(lines)
            # The job publishes its final state after its last line, and the
            # lines are read after the status: they are all printed by now.
            if status.get("state") in FINAL:
                return status
        if job is None:
            if now - last_seen > ANNOUNCE_TTL:
                raise RebuildFailed("the fanout job stopped during the rebuild")
        else:
            last_seen = now
            # (A job of an earlier release does not say what it runs.)
            if job.get("running") == request_id or "running" not in job:
                not_running = None
            elif not_running is None:
                not_running = now
            elif now - not_running > NOT_RUNNING_GRACE:
                raise RebuildFailed(
                    "the fanout job is no longer running the rebuild (it restarted, "
                    "or its last report was lost)"
                )
        time.sleep(0.2)
