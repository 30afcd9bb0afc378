"""The generation supervisor: keeps the fanout query running on the right
generation, follows rebuilds, and waits (instead of crash-looping) when the
timelines cannot be continued.

* A rebuild (spark.rebuild.stages) hands a new generation over: the query restarts
  on it from the rebuild's snapshot offsets with the rebuilt author states,
  and the supervisor switches readers to it once its watermark has caught
  up with the live one (docs/decisions.md D15), then deletes the old one.
  A generation handed over, then passed by a newer hand-over before that
  switch, is deleted when the job takes over the newer one.
* Redis lost the generation being written (restarted empty, FLUSHALL): the
  checkpoint says batches were applied that Redis no longer has, so the job
  waits for a rebuild rather than refill timelines without their history.
* The broker lost data (the log is behind the checkpoint): same.
* Redis lost writes (a crash with AOF ``everysec`` loses up to a second):
  its watermark is behind the batches the checkpoint says were applied.
  The checkpoint is rewound to the watermark's batch and those batches run
  again (every write is idempotent); further back than Spark keeps state
  for, the job waits for a rebuild instead.
* The job was down longer than the changelogs keep tombstones
  (``STARLING_TOMBSTONE_RETENTION_HOURS``): deletes and unfollows it has not
  read may be gone from the log. It refuses to resume and waits for a
  rebuild, saying so.
* The checkpoint keeps the join's state in another layout than this
  version's (an upgrade that changed it): resuming would read every author
  as new. It waits for a rebuild, saying so.
* Anything else (Redis or Kafka briefly down): restart with back-off.

What went wrong is established by looking (does the generation exist? is
the log behind the checkpoint?), not by reading the query's error text.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from fanout.config import StarlingConfig
from fanout.kafka import changelog_retention_ms
from fanout.store.generations import GenerationState
from fanout.store.timelines import TimelineStore
from spark.rebuild.finish import discard_generation
from spark.runtime.session import TUNING
from spark.source.kafka_io import MissingTopic, end_offsets
from spark.source.offsets import Offsets, data_loss
from spark.stream.checkpoint import (
    checkpoint_for,
    committed_batches,
    committed_offsets,
    idle_hours,
    layout_of,
    mark_alive,
    mark_layout,
    older_than,
    rewind,
)
from spark.stream.operator import STATE_LAYOUT

log = logging.getLogger("starling.fanout")

#: How often the running job looks for a handover or a switch (seconds).
WATCH_INTERVAL = 1.0
#: How often a job waiting for a rebuild says so (seconds).
WAITING_REMINDER = 60.0
#: How often a running job marks its checkpoint as alive (seconds).
ALIVE_INTERVAL = 60.0
#: How many batches back Spark can still run again: it keeps the state of the
#: last spark.sql.streaming.minBatchesToRetain (spark/runtime/session.py).
REPLAYABLE_BATCHES = int(TUNING["spark.sql.streaming.minBatchesToRetain"]) - 1


@dataclass(frozen=True)
class Target:
    """The generation the job writes, and how its query starts."""

    generation: int
    checkpoint: Path
    starting_offsets: Offsets | None = None
    initial_state: str | None = None  # parquet directory written by the rebuild

    @property
    def takeover(self) -> bool:
        return self.starting_offsets is not None


#: start(target) -> the running streaming query.
StartQuery = Callable[[Target], Any]


def generation_checkpoint(store: TimelineStore, root: Path, generation: int) -> Path:
    """The checkpoint of ``generation`` as it exists now in Redis
    (:func:`checkpoint_for`). A checkpoint named by the number alone (an older
    release) is renamed to it if it belongs to this generation, and removed
    if it was left by an earlier generation of that number."""
    created_at = float(store.generation_meta(generation).get("created_at", 0))
    path = checkpoint_for(root, generation, created_at)
    legacy = checkpoint_for(root, generation)
    if path != legacy and legacy.is_dir() and not path.exists():
        if older_than(legacy, created_at):
            log.warning("removing the stale checkpoint %s", legacy)
            shutil.rmtree(legacy, ignore_errors=True)
        else:
            legacy.rename(path)
    return path


def choose_target(store: TimelineStore, root: Path, blocked: int | None = None) -> Target | None:
    """A rebuilt generation waiting for the job, else the active one.

    None when the job cannot go on by itself and waits for a rebuild: Redis
    lost its timelines while a checkpoint says batches were applied, or the
    ``blocked`` generation's checkpoint is unusable (the broker lost data).
    """
    handover = store.pending_handover()
    if handover is not None and handover != blocked:
        checkpoint = generation_checkpoint(store, root, handover)
        meta = store.generation_meta(handover)
        if committed_batches(checkpoint) or "snapshot" not in meta:
            return Target(handover, checkpoint)
        return Target(handover, checkpoint, json.loads(meta["snapshot"]), meta.get("state_path"))
    active = store.active_generation()
    if active is None or not store.generation_exists(active):
        if root.is_dir() and any(committed_batches(p) for p in root.iterdir()):
            return None
        active = store.ensure_active_generation()
    if active == blocked:
        return None
    return Target(active, generation_checkpoint(store, root, active))


def retire(store: TimelineStore, root: Path, old: int) -> None:
    """Delete a generation that is no longer active: its timelines, its
    checkpoint and the rebuilt state it started from."""
    created_at = store.generation_meta(old).get("created_at", 0)
    deleted = discard_generation(store, old)
    shutil.rmtree(checkpoint_for(root, old, created_at), ignore_errors=True)
    log.info("generation %d deleted (%d keys)", old, deleted)


def maybe_switch(store: TimelineStore, root: Path, target: Target) -> bool:
    """Make a taken-over generation active once it has caught up with the live
    one, so readers never go back in time: its contiguous watermark (every
    seq up to it applied) at least the live one's, and its highest seq too.
    Then delete the old generation."""
    active = store.active_generation()
    if active == target.generation:
        return False
    new = store.watermark(target.generation)
    if new is None:
        return False
    live = (
        store.watermark(active) if active is not None and store.generation_exists(active) else None
    )
    if live is not None and (new.contiguous < live.contiguous or new.seq < live.seq):
        return False
    store.switch(target.generation, active)
    log.info(
        "generation %d is active (watermark %d; generation %s retired)",
        target.generation,
        new.seq,
        active,
    )
    if active is not None and active != target.generation:
        try:
            retire(store, root, active)
        except (OSError, redis.RedisError):
            log.exception("could not delete generation %d", active)
    if live is None:
        # Redis had lost the generations every other checkpoint here belongs to.
        for path in root.glob("gen-*"):
            if path != target.checkpoint:
                log.info("removing the checkpoint of a generation Redis lost: %s", path)
                shutil.rmtree(path, ignore_errors=True)
    return True


class Supervisor:
    """Runs the query for the right target until asked to stop."""

    def __init__(
        self,
        store: TimelineStore,
        config: StarlingConfig,
        root: Path,
        start: StartQuery,
        stopping: threading.Event,
    ) -> None:
        self.store = store
        self.config = config
        self.root = root
        self.start = start
        self.stopping = stopping
        self.blocked: int | None = None
        self._said = 0.0

    def run(self) -> int:
        backoff = 1.0
        while not self.stopping.is_set():
            try:
                target = choose_target(self.store, self.root, self.blocked)
            except redis.RedisError as exc:
                log.warning("Redis unavailable (%s); retrying in %.0fs", exc, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            if target is None:
                self._waiting_for_rebuild()
                continue
            if target.takeover:
                self.drop_superseded(target)
            refusal = self.check_resumable(target)
            if refusal is not None:
                log.error("generation %d cannot be resumed: %s", target.generation, refusal)
                self.blocked = target.generation
                continue
            mark_alive(target.checkpoint)
            mark_layout(target.checkpoint)
            query = self.start(target)
            started = time.monotonic()
            restart = self.watch(query, target)
            if self.stopping.is_set():
                query.stop()
                return 0
            if restart:
                query.stop()
                continue
            cause = self.diagnose(target)
            if cause is not None:
                log.error("fanout cannot continue generation %d: %s", target.generation, cause)
                continue
            if time.monotonic() - started > 60:
                backoff = 1.0
            log.warning(
                "fanout query failed (%s); restarting in %.0fs",
                _first_line(str(query.exception())),
                backoff,
            )
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, 60.0)
        return 0

    def drop_superseded(self, target: Target) -> None:
        """Delete the generations handed over before ``target`` (the job takes
        over only the last one handed over) and never switched to: a second
        rebuild handed over before the first one's switch, even across a
        restart of the job, would leave the first one's timelines in Redis for
        good. Only those numbered below ``target``: a rebuild being handed
        over now is ``ready`` a moment before it is named the hand-over."""
        store = self.store
        try:
            for generation, meta in store.generations().items():
                if generation < target.generation and meta["state"] == GenerationState.READY:
                    log.warning(
                        "generation %d was handed over, then generation %d before the switch: "
                        "deleting %d",
                        generation,
                        target.generation,
                        generation,
                    )
                    retire(store, self.root, generation)
        except (OSError, redis.RedisError):
            log.exception(
                "could not delete the generations handed over before %d", target.generation
            )

    def check_resumable(self, target: Target) -> str | None:
        """None if the query can start from ``target``'s checkpoint, after
        rewinding it if Redis lost applied batches; else why it cannot."""
        batches = committed_batches(target.checkpoint)
        layout = layout_of(target.checkpoint)
        if batches and layout != STATE_LAYOUT:
            return (
                f"its checkpoint keeps the join's state as {layout or 'one value per author'}, "
                f"this version as {STATE_LAYOUT}; rebuild the timelines "
                "(manage.py rebuild_timelines)"
            )
        if not batches or target.takeover:
            return None
        hours = idle_hours(target.checkpoint, time.time())
        # What the operator set, or what the broker keeps if that is shorter
        # (a topic altered since it was made, or made by another version).
        retention_ms = self.config.tombstone_retention_hours * 3_600_000
        kept = changelog_retention_ms(self.config)
        if kept is not None:
            retention_ms = min(retention_ms, kept)
        if hours * 3_600_000 > retention_ms:
            return (
                f"the job last ran {_duration(hours * 3600)} ago, longer than the changelogs "
                f"keep tombstones ({_duration(retention_ms / 1000)}): deletes and unfollows "
                "may have been purged from the log; rebuild the timelines "
                "(manage.py rebuild_timelines)"
            )
        try:
            applied = self.store.applied_batch(target.generation)
        except redis.RedisError:
            return None  # the query's start will say it
        if applied is None or applied >= batches[-1]:
            return None
        behind = batches[-1] - applied
        if behind > REPLAYABLE_BATCHES:
            return (
                f"Redis lost the writes of {behind} micro-batches (its watermark is at batch "
                f"{applied}, the checkpoint at {batches[-1]}), more than can be run again "
                f"({REPLAYABLE_BATCHES}); rebuild the timelines (manage.py rebuild_timelines)"
            )
        dropped = rewind(target.checkpoint, applied)
        log.warning(
            "Redis lost the writes of micro-batches %d-%d of generation %d (its watermark is "
            "behind the checkpoint: a crash with AOF everysec?); running them again",
            dropped[0],
            dropped[-1],
            target.generation,
        )
        return None

    def watch(self, query: Any, target: Target) -> bool:
        """Wait while the query runs; True when it must be restarted: a new rebuild
        was handed over, Redis lost the generation being written, or lost
        applied batches (noticed at once, not at the next write)."""
        store = self.store
        alive = time.monotonic()
        while query.isActive and not self.stopping.is_set():
            self.stopping.wait(WATCH_INTERVAL)
            if time.monotonic() - alive > ALIVE_INTERVAL:
                mark_alive(target.checkpoint)
                alive = time.monotonic()
            try:
                handover = store.pending_handover()
                if handover is not None and handover != target.generation:
                    log.info("rebuilt generation %d handed over: restarting on it", handover)
                    return True
                if not store.generation_exists(target.generation):
                    log.error("Redis lost generation %d (restarted empty?)", target.generation)
                    return True
                if self.lost_writes(target):
                    return True
                if target.takeover or store.active_generation() != target.generation:
                    maybe_switch(store, self.root, target)
            except redis.RedisError as exc:
                log.warning("Redis unavailable while watching for rebuilds: %s", exc)
        return False

    def lost_writes(self, target: Target) -> bool:
        """True when Redis's watermark is behind a batch the checkpoint has
        committed. The watermark is written before Spark commits its batch, and
        the commits are listed first here, so this is never a race."""
        batches = committed_batches(target.checkpoint)
        applied = self.store.applied_batch(target.generation) if batches else None
        if batches and applied is not None and applied < batches[-1]:
            log.error(
                "Redis's watermark of generation %d is at batch %d, the checkpoint at %d: "
                "Redis lost writes (a restart, or a failover); restarting to run them again",
                target.generation,
                applied,
                batches[-1],
            )
            return True
        return False

    def diagnose(self, target: Target) -> str | None:
        """Why the query cannot simply be restarted, or None (a transient failure)."""
        try:
            if not self.store.generation_exists(target.generation):
                return "Redis lost its timelines (waiting for a rebuild)"
        except redis.RedisError:
            return None
        start = committed_offsets(target.checkpoint)
        if start is None:
            return None
        try:
            ends = end_offsets(self.config.kafka_client(), self.config.topics.all(), timeout=5)
            problems = data_loss(start, ends)
        except MissingTopic as exc:
            problems = [str(exc)]
        except RuntimeError:
            return None  # the broker does not answer: transient
        if problems:
            self.blocked = target.generation
            return "the Kafka log is behind the checkpoint: " + "; ".join(problems)
        return None

    def _waiting_for_rebuild(self) -> None:
        if time.monotonic() - self._said > WAITING_REMINDER:
            log.error(
                "the timelines cannot be continued from the checkpoint (Redis or the broker "
                "lost data): waiting for a rebuild (manage.py rebuild_timelines), or restart "
                "the job with --reset"
            )
            self._said = time.monotonic()
        self.stopping.wait(2.0)


def _first_line(message: str) -> str:
    for line in message.splitlines():
        if "Error" in line or "error" in line:
            return line.strip()[:300]
    return message.strip().splitlines()[0][:300] if message.strip() else "unknown error"


def _duration(seconds: float) -> str:
    """``2 h``, ``2.5 h``, ``3.5 s``: hours from an hour on, else seconds."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    return f"{seconds:.1f} s".replace(".0 s", " s")
