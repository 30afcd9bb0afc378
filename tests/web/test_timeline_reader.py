"""The read path's decisions, with a fake store and a fake clock (pure logic):
how long a ``min_seq`` read waits, what it waits on, how many wait at once,
and where a page comes from."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import orjson

from fanout.store.reads import Page
from feed.timeline import (
    HEADER_SOURCE,
    HEADER_STALE,
    HEADER_VERSION,
    TimelineQuery,
    TimelineReader,
)

PAGE = orjson.dumps({"tweets": [{"id": 30}, {"id": 20}], "next_max_id": 19})


@dataclass
class FakeStore:
    """A store whose watermark moves as the fake clock goes."""

    watermark_at: dict[float, int]  # clock time -> contiguous watermark from then on
    clock: list[float]
    status: str = "ok"
    partial: bool = False
    page_reads: int = 0
    watermark_reads: int = 0
    #: (owner, reader) of each page read.
    readers: list[tuple[int, int | None]] = field(default_factory=list)

    def watermark(self) -> int:
        return max(w for t, w in self.watermark_at.items() if t <= self.clock[0])

    def read_page(self, owner: int, *, reader: int | None = None, **_: Any) -> Page:
        self.page_reads += 1
        self.readers.append((owner, reader))
        return Page(
            self.status,
            1,
            self.watermark(),
            0.0,
            0.0,
            PAGE,
            version=7,
            partial=self.partial,
            first=True,
        )

    def contiguous_watermark(self, generation: int) -> int:
        self.watermark_reads += 1
        return self.watermark()

    claims: set[int] = field(default_factory=set)

    def claim_regeneration(self, generation: int, user_id: int, *, window: int) -> bool:
        if user_id in self.claims:
            return False
        self.claims.add(user_id)
        return True

    def release_regeneration(self, generation: int, user_id: int) -> None:
        self.claims.discard(user_id)

    def regenerating_until(self, generation: int, user_id: int, seq: int, *, window: int) -> None:
        pass


@dataclass
class Harness:
    store: FakeStore
    high_water: int = 100
    clock: list[float] = field(default_factory=lambda: [0.0])
    continued: list[TimelineQuery] = field(default_factory=list)

    def reader(self, **kw: Any) -> TimelineReader:
        def sleep(seconds: float) -> None:
            self.clock[0] += seconds

        def continuation(user_id: int, query: TimelineQuery) -> dict[str, Any]:
            self.continued.append(query)
            return {"tweets": [{"id": 10}], "next_max_id": None}

        return TimelineReader(
            store=self.store,  # type: ignore[arg-type]
            fallback=lambda *a: b"{}",
            regenerate=lambda u: 0,
            continuation=continuation,
            high_water=lambda: self.high_water,
            clock=lambda: self.clock[0],
            sleep=sleep,
            **kw,
        )


def harness(watermark_at: dict[float, int], high_water: int = 100) -> Harness:
    clock = [0.0]
    return Harness(FakeStore(watermark_at, clock), high_water, clock)


def test_a_reached_seq_reads_once_without_waiting() -> None:
    h = harness({0.0: 50})
    response = h.reader().read(1, 0.0, TimelineQuery(min_seq=40))
    assert HEADER_STALE not in response.headers and h.store.page_reads == 1
    assert response.headers[HEADER_VERSION] == "1.7" and response.headers[HEADER_SOURCE] == "redis"


def test_the_wait_polls_the_watermark_alone_then_reads_the_page_once() -> None:
    h = harness({0.0: 50, 0.5: 60})
    response = h.reader(max_wait=2.0, poll=0.1).read(1, 0.0, TimelineQuery(min_seq=60))
    assert HEADER_STALE not in response.headers
    assert h.store.page_reads == 2 and h.store.watermark_reads >= 5  # one page read after
    assert 0.5 <= h.clock[0] < 0.7


def test_a_seq_beyond_the_outbox_is_clamped_to_its_newest() -> None:
    h = harness({0.0: 100}, high_water=100)
    response = h.reader().read(1, 0.0, TimelineQuery(min_seq=2**62))
    assert HEADER_STALE not in response.headers and h.clock[0] == 0.0


def test_an_unreached_seq_answers_stale_after_the_bounded_wait() -> None:
    h = harness({0.0: 50}, high_water=100)
    response = h.reader(max_wait=2.0, poll=0.1).read(1, 0.0, TimelineQuery(min_seq=90))
    assert response.headers[HEADER_STALE] == "true" and 2.0 <= h.clock[0] < 2.2


def test_only_a_bounded_number_of_reads_wait_at_once() -> None:
    h = harness({0.0: 50}, high_water=100)
    reader = h.reader(max_wait=2.0, max_waiters=2)
    assert reader._waiters.acquire(blocking=False) and reader._waiters.acquire(blocking=False)
    response = reader.read(1, 0.0, TimelineQuery(min_seq=90))  # two already waiting
    assert response.headers[HEADER_STALE] == "true" and h.clock[0] == 0.0
    assert isinstance(reader._waiters, threading.BoundedSemaphore)


def test_a_page_past_what_redis_keeps_comes_from_the_database() -> None:
    h = harness({0.0: 50})
    h.store.status = "beyond"
    response = h.reader().read(1, 0.0, TimelineQuery(count=5, max_id=9))
    assert response.headers[HEADER_SOURCE] == "database"
    assert h.continued == [TimelineQuery(count=5, max_id=9)]


def test_a_page_redis_cannot_fill_is_filled_from_the_database_below_its_last_entry() -> None:
    h = harness({0.0: 50})
    h.store.partial = True
    response = h.reader().read(1, 0.0, TimelineQuery(count=5))
    assert response.headers[HEADER_SOURCE] == "redis+database"
    assert orjson.loads(response.body) == {
        "tweets": [{"id": 30}, {"id": 20}, {"id": 10}],
        "next_max_id": None,
    }
    assert h.continued == [TimelineQuery(count=3, max_id=19)]


def test_a_cold_read_answers_from_the_database_even_when_its_regeneration_fails() -> None:
    h = harness({0.0: 50})
    h.store.status = "cold"

    def regenerate(user_id: int) -> int:
        raise TimeoutError("writes in flight hold the database")

    reader = h.reader()
    reader.regenerate = regenerate
    response = reader.read(1, 0.0, TimelineQuery(count=5))
    assert (response.status, response.body) == (200, b"{}")
    assert response.headers[HEADER_SOURCE] == "fallback"
    assert h.store.claims == set()  # released: the next cold read asks again


def test_a_cold_read_with_a_min_seq_waits_for_the_watermark_its_counts_come_from() -> None:
    """The database's page holds the write, but the counts in it are the
    fanout job's: a min_seq beyond the watermark waits for it, as a page from
    Redis does, and is told stale if it does not come."""
    h = harness({0.0: 50, 0.5: 60})
    h.store.status = "cold"
    response = h.reader(max_wait=2.0, poll=0.1).read(1, 0.0, TimelineQuery(min_seq=60))
    assert response.headers[HEADER_SOURCE] == "fallback" and HEADER_STALE not in response.headers
    assert 0.5 <= h.clock[0] < 0.7
    assert response.headers["X-Starling-Watermark"] == "60"
    late = harness({0.0: 50})
    late.store.status = "cold"
    response = late.reader(max_wait=2.0, poll=0.1).read(1, 0.0, TimelineQuery(min_seq=90))
    assert response.headers[HEADER_STALE] == "true" and 2.0 <= late.clock[0] < 2.2
    assert response.body == b"{}"  # the database's page all the same


def test_a_mentions_read_reads_minus_u_with_the_user_s_token_and_activity() -> None:
    """User 7's mentions (owner -7): the page, the fallback and the
    regeneration are -7's; the token and the activity are 7's."""
    h = harness({0.0: 50})
    h.store.status = "cold"
    calls: list[tuple[str, int]] = []
    reader = h.reader(seen=lambda u: calls.append(("seen", u)))
    reader.fallback = lambda owner, *_: calls.append(("fallback", owner)) or b"{}"
    reader.regenerate = lambda owner: calls.append(("regenerate", owner)) or 0
    response = reader.read(7, 0.0, TimelineQuery(count=5), owner=-7)
    assert response.headers[HEADER_SOURCE] == "fallback"
    assert h.store.readers == [(-7, 7)]
    assert calls == [("seen", 7), ("fallback", -7), ("regenerate", -7)]
    assert h.store.claims == {-7}
    h.store.status = "beyond"
    reader.read(7, 0.0, TimelineQuery(count=5, max_id=9), owner=-7)
    assert h.continued == [TimelineQuery(count=5, max_id=9)] and h.store.readers[-1] == (-7, 7)
