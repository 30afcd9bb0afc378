"""The timeline store's bookkeeping in Redis: the records the job set aside
(dead letters) and the figures ``/metrics`` shows without SQL.

Part of :class:`fanout.store.timelines.TimelineStore`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from fanout.store import keys
from fanout.store.redis_conn import Client, command, run


class Bookkeeping:
    """Dead letters and figures of the timeline store (mixed into it)."""

    redis: Client

    def dead_letter(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Set bad records aside, keyed by ``topic/partition/offset`` (idempotent)."""
        mapping = {_position(r): orjson.dumps(r) for r in records}
        if mapping:
            self.redis.hset(keys.DEAD_LETTERS, mapping=mapping)  # type: ignore[arg-type]
        return len(mapping)

    def clear_dead_letters(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Forget these dead letters (as :meth:`dead_letters` returned them);
        records set aside since stay. Returns how many were forgotten."""
        fields = [_position(r) for r in records]
        return int(self.redis.hdel(keys.DEAD_LETTERS, *fields)) if fields else 0

    def dead_letters(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for v in self.redis.hgetall(keys.DEAD_LETTERS).values()]

    def dead_letter_count(self) -> int:
        return int(self.redis.hlen(keys.DEAD_LETTERS))

    # --- the figures /metrics shows without SQL

    def keep_database_figures(self, figures: Mapping[str, float]) -> None:
        """The figures that need SQL (computed by a beat task), for scrapes to read."""
        self.redis.hset(keys.DB_GAUGES, mapping=dict(figures))  # type: ignore[arg-type]

    def database_figures(self) -> dict[str, float]:
        return _floats(self.redis.hgetall(keys.DB_GAUGES))

    def relay_figures(self) -> dict[str, float]:
        """``published`` (rows put on Kafka, ever) and ``failures`` (runs failed
        in a row) of the outbox relay (feed.relay.RelayCoordinator)."""
        published, failures = run(
            self.redis,
            [command("HGET", keys.RELAY_STATS, "published"), command("GET", keys.RELAY_FAILURES)],
        )
        return {"published": float(published or 0), "failures": float(failures or 0)}


def _position(record: Mapping[str, Any]) -> str:
    """A dead letter's field: where the record was, ``topic/partition/offset``."""
    return f"{record['topic']}/{record['partition']}/{record['offset']}"


def _floats(raw: Mapping[Any, Any]) -> dict[str, float]:
    """A Redis hash of numbers, by name."""
    return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in raw.items()}
