"""The wiring of the timeline reads: which store, fallback and
regeneration :class:`feed.timeline.TimelineReader` runs with (each for a
home timeline, owner u, or a mentions timeline, owner -u).

The WSGI fast path (:mod:`feed.fastpath`), which answers
``GET /api/v1/timeline`` and ``GET /api/v1/mentions``, takes its reader from
here.
"""

from __future__ import annotations

from django.conf import settings

from fanout.config import StarlingConfig
from fanout.procs import per_process
from fanout.store.timelines import store_for
from feed import outbox, services, view_sql
from feed.timeline import TimelineReader


def timeline_reader() -> TimelineReader:
    """The process's reader for the current configuration (made once)."""
    return _reader(settings.STARLING, settings.STARLING_READ_YOUR_WRITES_WAIT)


@per_process
def _reader(config: StarlingConfig, max_wait: float) -> TimelineReader:
    return TimelineReader(
        store=store_for(config),
        fallback=view_sql.timeline_fallback,
        regenerate=services.timeline_reset,
        continuation=view_sql.timeline_page,
        high_water=outbox.high_water_seq,
        seen=services.user_seen,
        max_wait=max_wait,
    )
