"""The wiring of the home-timeline read: which store, fallback and
regeneration :class:`feed.timeline.TimelineReader` runs with.

Both entry points of ``GET /api/v1/timeline`` take their reader from here:
the WSGI fast path (:mod:`feed.fastpath`) and the Django view
(:class:`feed.apis.TimelineApi`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from fanout.config import StarlingConfig
from fanout.procs import per_process
from fanout.store.timelines import store_for
from feed import outbox, selectors, services
from feed.timeline import TimelineQuery, TimelineReader


def timeline_reader() -> TimelineReader:
    """The process's reader for the current configuration (made once)."""
    return _reader(settings.STARLING, settings.STARLING_READ_YOUR_WRITES_WAIT)


def _regenerate(user_id: int) -> int:
    return services.timeline_reset(user_id=user_id)


def _seen(user_id: int) -> None:
    services.user_seen(user_id=user_id)


def _continuation(user_id: int, query: TimelineQuery) -> dict[str, Any]:
    return selectors.home_timeline_page(
        user_id, count=query.count, max_id=query.max_id, since_id=query.since_id
    )


@per_process
def _reader(config: StarlingConfig, max_wait: float) -> TimelineReader:
    return TimelineReader(
        store=store_for(config),
        fallback=selectors.home_timeline_fallback,
        regenerate=_regenerate,
        continuation=_continuation,
        high_water=outbox.high_water_seq,
        seen=_seen,
        max_wait=max_wait,
    )
