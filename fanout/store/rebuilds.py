"""The rebuild's channel in Redis: its status (the terminal and the admin
show it), its progress lines, the command's request to the running fanout
job and the job's announcement. Part of the timeline store
(:class:`fanout.store.timelines.TimelineStore`): the keys and commands only;
the protocol between the command and the job (who claims, when a request is
dead, cancelling) is :mod:`spark.rebuild.request` and
:mod:`spark.rebuild.service`'s."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from fanout.store import keys
from fanout.store.redis_conn import Client, text
from fanout.store.scripts import Script


class RebuildState:
    """What the rebuild's status hash (:data:`fanout.store.keys.REBUILD_STATUS`) says."""

    RUNNING = "running"
    #: Verified, not yet handed over (a rebuild the fanout job ran for a command).
    BUILT = "built"
    SUCCEEDED = "succeeded"
    HANDED_OVER = "handed-over"
    FAILED = "failed"


class RebuildChannel:
    """The rebuild's status, log and requests (mixed into the timeline store)."""

    redis: Client
    _rebuild_request: Script

    def publish_rebuild_status(self, **fields: Any) -> None:
        """Record the running rebuild's state, stage or summary (the admin shows it)."""
        mapping = {**fields, "updated_at": time.time()}
        self.redis.hset(keys.REBUILD_STATUS, mapping=mapping)  # type: ignore[arg-type]

    def count_records_read(self, n: int) -> None:
        """Add ``n`` to the running rebuild's records read (by its read tasks)."""
        self.redis.hincrby(keys.REBUILD_STATUS, keys.REBUILD_RECORDS_READ, n)

    def records_read(self) -> int:
        """How many changelog records the running rebuild's read tasks have
        gone through so far (each adds its own as it goes)."""
        raw = self.redis.hget(keys.REBUILD_STATUS, keys.REBUILD_RECORDS_READ)
        return int(raw) if raw else 0

    def clear_rebuild_status(self) -> None:
        self.redis.delete(keys.REBUILD_STATUS)
        self.redis.delete(keys.REBUILD_LOG)

    def announce_fanout_job(self, about: Mapping[str, Any], ttl: float) -> None:
        """The fanout job is running and takes rebuilds, for ``ttl`` seconds.
        With two jobs running (one starting before the other has stopped),
        the announcement is the last one's; each job's instance
        (``about["instance"]``) is also known alive on its own
        (:meth:`fanout_instance_alive`)."""
        self.redis.set(keys.FANOUT_JOB, orjson.dumps(about), px=int(ttl * 1000))
        self.redis.set(keys.FANOUT_INSTANCE_PREFIX + str(about["instance"]), 1, px=int(ttl * 1000))

    def fanout_instance_alive(self, instance: str) -> bool:
        """Whether the fanout job of ``instance`` has announced itself lately."""
        return bool(self.redis.exists(keys.FANOUT_INSTANCE_PREFIX + instance))

    def fanout_job(self) -> dict[str, Any] | None:
        """What the running fanout job announced, or None if none is running."""
        raw = self.redis.get(keys.FANOUT_JOB)
        return orjson.loads(raw) if raw else None

    def request_rebuild(self, request: Mapping[str, Any], ttl: float) -> bool:
        """Ask the fanout job for a rebuild (``request["id"]`` names it); False if
        another rebuild was asked for and is still running. The request
        expires ``ttl`` seconds after it was last renewed
        (:meth:`renew_rebuild_request`): the job then cancels it."""
        return bool(
            self.redis.set(keys.REBUILD_REQUEST, orjson.dumps(request), px=int(ttl * 1000), nx=True)
        )

    def rebuild_request(self) -> dict[str, Any] | None:
        raw = self.redis.get(keys.REBUILD_REQUEST)
        return orjson.loads(raw) if raw else None

    def renew_rebuild_request(self, request_id: str, ttl: float) -> bool:
        """Keep request ``request_id`` alive ``ttl`` seconds more; False if it is gone."""
        ms = max(1, int(ttl * 1000))
        return bool(self._rebuild_request(keys=[keys.REBUILD_REQUEST], args=[request_id, ms]))

    def end_rebuild_request(self, request_id: str) -> None:
        """Withdraw request ``request_id`` (if it is still the current one): a
        job running it cancels it."""
        self._rebuild_request(keys=[keys.REBUILD_REQUEST], args=[request_id, 0])

    def claim_rebuild_request(self, request_id: str, by: str) -> bool:
        """Take request ``request_id`` (the job, to run it; its command, to run it
        itself after the job did not answer): True for the first to ask."""
        key = keys.REBUILD_CLAIM_PREFIX + request_id
        return bool(self.redis.set(key, by, nx=True, ex=3600))

    def rebuild_claimed_by(self, request_id: str) -> str | None:
        """Who took request ``request_id`` (:meth:`claim_rebuild_request`), if anyone."""
        raw = self.redis.get(keys.REBUILD_CLAIM_PREFIX + request_id)
        return text(raw) if raw is not None else None

    def log_rebuild(self, line: str) -> None:
        """One progress line of a rebuild the job runs, for its command to print."""
        self.redis.rpush(keys.REBUILD_LOG, line)

    def rebuild_log(self, start: int) -> list[str]:
        """The progress lines from the ``start``-th on."""
        return [text(line) for line in self.redis.lrange(keys.REBUILD_LOG, start, -1)]

    def rebuild_status(self) -> dict[str, str]:
        """The last rebuild's state, stage and summary (what spark.rebuild.stages publishes)."""
        return {text(k): text(v) for k, v in self.redis.hgetall(keys.REBUILD_STATUS).items()}
