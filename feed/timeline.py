"""The timeline reads: one Redis round trip, no SQL.

:func:`handle` is the whole endpoint, outside Django's request machinery: it
takes the request's method, ``Authorization`` header and query string and
returns status, headers and body (errors in the API's one envelope). Its one
caller is the WSGI fast path of :mod:`feed.fastpath` (no Django middleware, no
URL resolving), for ``GET /api/v1/timeline`` (the user's home timeline) and
``GET /api/v1/mentions`` (their mentions: the timeline whose owner is -u,
docs/decisions.md D30, read the same way); Django has no view for the URLs
(the OpenAPI schema declares them in feed.schema).

A warm read is one call of the timeline store's read script (active
generation, token revocation, the page of ids by cursor, the bodies, the
watermark, the JSON assembled in Redis), after an HMAC check of the token.
The database answers, with one bounded query (a page at a time):

* a *cold* timeline (missing in the active generation), which is then
  refilled through the fanout job (a reset of that one timeline);
* pages below what Redis keeps (``max_id`` past its oldest entry, header
  ``X-Starling-Source: database``), so paging never dead-ends at the cap;
* the rest of a page Redis could not fill while a timeline short after
  removals waits for its refill (``redis+database``);
* a ``min_seq`` beyond the watermark: the outbox's newest seq, which bounds
  the wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs

import orjson
import redis

from fanout.model import ids, owners
from fanout.store.reads import Page
from fanout.store.timelines import TimelineStore
from feed.auth import InvalidToken, bearer_token, verify_token_cached
from feed.errors import NotFound, error_body
from feed.validation import InvalidInput, whole_number

log = logging.getLogger("starling.timeline")

MAX_COUNT = 200
DEFAULT_COUNT = 50
MAX_SEQ = 2**63 - 1
#: A regeneration is asked for at most once per user and window.
REGENERATION_WINDOW = 60

HEADER_SOURCE = "X-Starling-Source"  # redis | redis+database | database | fallback
HEADER_WATERMARK = "X-Starling-Watermark"  # highest outbox seq the timelines reflect
HEADER_LAG = "X-Starling-Fanout-Lag"  # seconds from Kafka to Redis for the newest applied event
HEADER_AGE = "X-Starling-Watermark-Age"  # seconds since the fanout job last applied a batch
HEADER_STALE = "X-Starling-Stale"  # "true": min_seq was not reached in time
#: "<generation>.<version>": changes when an entry arrives below one a poller saw
HEADER_VERSION = "X-Starling-Timeline-Version"


class InvalidParameter(ValueError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class Param:
    """A query parameter of ``GET /api/v1/timeline`` and ``/mentions``: the
    parser and the OpenAPI schema (feed.schema) are both made from these."""

    name: str
    low: int
    high: int
    default: int | None
    help: str


PARAMS = (
    Param("count", 1, MAX_COUNT, DEFAULT_COUNT, "Tweets per page."),
    Param("max_id", 1, ids.MAX_ID, None, "Newest id to return (inclusive)."),
    Param("since_id", 1, ids.MAX_ID, None, "Return only ids above this."),
    Param(
        "min_seq",
        0,
        MAX_SEQ,
        None,
        "Wait (a bounded time) until the timelines reflect this write seq.",
    ),
)


@dataclass(frozen=True)
class TimelineQuery:
    count: int = DEFAULT_COUNT
    max_id: int | None = None
    since_id: int | None = None
    min_seq: int | None = None


def _int(params: Mapping[str, list[str]], param: Param) -> int | None:
    name = param.name
    values = params.get(name)
    if not values:
        return param.default
    if len(values) > 1:
        raise InvalidParameter(name, "give it once")
    try:
        return whole_number(name, values[0], low=param.low, high=param.high)
    except InvalidInput as exc:
        raise InvalidParameter(name, exc.message) from None


def parse_query(query_string: str) -> TimelineQuery:
    params = parse_qs(query_string, keep_blank_values=True)
    return TimelineQuery(**{p.name: _int(params, p) for p in PARAMS})  # type: ignore[arg-type]


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def error(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    fields: dict[str, list[str]] | None = None,
) -> Response:
    """An error in the API's one envelope (:func:`feed.errors.error_body`)."""
    return Response(status, orjson.dumps(error_body(code, message, fields)), dict(headers or {}))


def _revoked() -> Response:
    return error(
        401,
        "authentication_failed",
        "token has been revoked or the user deactivated; request a new one",
        {"WWW-Authenticate": 'Bearer realm="starling"'},
    )


#: The owner of a timeline is user u for u's home timeline, -u for u's mentions.
#: Fallback(owner, issued_at, query) -> the page body (JSON bytes), from the
#: database; None when the user or the token is no longer valid there.
Fallback = Callable[[int, float, TimelineQuery], bytes | None]
#: Continuation(owner, query) -> a page ({"tweets", "next_max_id"}) from the
#: database, for the part of a warm timeline that Redis does not keep.
Continuation = Callable[[int, TimelineQuery], dict[str, Any]]
#: Regenerate(owner) -> the outbox seq after which the timeline is complete.
Regenerate = Callable[[int], int]
#: HighWater() -> the newest seq in the outbox (what a min_seq can at most wait for).
HighWater = Callable[[], int]


@dataclass
class TimelineReader:
    store: TimelineStore
    fallback: Fallback
    regenerate: Regenerate
    continuation: Continuation
    high_water: HighWater
    #: Records a user's activity (their first read of the day; see fanout/store/lua/read_page.lua).
    seen: Callable[[int], None] = lambda user_id: None
    max_wait: float = 2.0
    #: Reads of this process that may wait for a min_seq at once; more answer at once.
    max_waiters: int = 4
    poll: float = 0.02
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    wall: Callable[[], float] = time.time
    _waiters: threading.BoundedSemaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._waiters = threading.BoundedSemaphore(self.max_waiters)

    def read(
        self, user_id: int, issued_at: float, query: TimelineQuery, *, owner: int | None = None
    ) -> Response:
        """A page of the timeline of ``owner`` (by default the user's home
        timeline; -user_id: their mentions) for the user whose token was
        issued at ``issued_at``."""
        owner = user_id if owner is None else owner
        page = self._page(owner, user_id, issued_at, query)
        if page.status == "revoked":
            return _revoked()
        if page.first:
            try:
                self.seen(user_id)
            except Exception:  # the read goes on; tomorrow's first read records it
                log.warning("could not record the activity of %d", user_id, exc_info=True)
        if page.status not in ("ok", "beyond"):
            return self._cold(owner, issued_at, query, page)
        stale = False
        if query.min_seq is not None and page.watermark_seq < query.min_seq:
            page, stale = self._wait(owner, user_id, issued_at, query, page)
        headers = self._watermark_headers(page)
        headers[HEADER_VERSION] = f"{page.generation}.{page.version}"
        if stale:
            headers[HEADER_STALE] = "true"
        if page.status == "beyond":  # below what Redis keeps: the database goes on
            headers[HEADER_SOURCE] = "database"
            return Response(200, orjson.dumps(self.continuation(owner, query)), headers)
        if page.partial:  # Redis ran out before the page was full
            headers[HEADER_SOURCE] = "redis+database"
            return Response(200, self._fill(owner, query, page.body), headers)
        headers[HEADER_SOURCE] = "redis"
        return Response(200, page.body, headers)

    def _page(self, owner: int, user_id: int, issued_at: float, query: TimelineQuery) -> Page:
        try:
            return self.store.read_page(
                owner,
                count=query.count,
                max_id=query.max_id,
                since_id=query.since_id,
                issued_at=issued_at,
                reader=user_id,
            )
        except redis.RedisError:
            return Page("unavailable")

    def _wait(
        self, owner: int, user_id: int, issued_at: float, query: TimelineQuery, page: Page
    ) -> tuple[Page, bool]:
        """Wait (bounded) until the timelines reflect ``query.min_seq``; the page
        read then, and whether it is still stale. A ``min_seq`` beyond the
        outbox's newest seq waits for that one; only ``max_waiters`` reads of a
        process wait at once (the others answer at once, stale); the wait
        polls the watermark alone, then reads the page once."""
        assert query.min_seq is not None and page.generation is not None
        target = min(query.min_seq, self.high_water())
        if page.watermark_seq >= target:
            return page, False
        if self._reached(page.generation, target) is None:
            return page, True
        again = self._page(owner, user_id, issued_at, query)
        if again.status not in ("ok", "beyond"):
            return page, True
        return again, again.watermark_seq < target

    def _reached(self, generation: int, target: int) -> int | None:
        """The watermark once it reaches ``target`` within the wait (polled), or
        None; only ``max_waiters`` reads of a process wait at once (the others
        get None at once)."""
        if not self._waiters.acquire(blocking=False):
            return None
        try:
            deadline = self.clock() + self.max_wait
            while (watermark := self.store.contiguous_watermark(generation)) < target:
                if self.clock() >= deadline:
                    return None
                self.sleep(self.poll)
        except redis.RedisError:
            return None
        finally:
            self._waiters.release()
        return watermark

    def _fill(self, owner: int, query: TimelineQuery, body: bytes) -> bytes:
        """The Redis page completed from the database, below its last entry."""
        first = orjson.loads(body)
        cursor = first["next_max_id"]
        if cursor is None:
            return body
        rest = self.continuation(
            owner,
            TimelineQuery(
                count=query.count - len(first["tweets"]), max_id=cursor, since_id=query.since_id
            ),
        )
        return orjson.dumps(
            {"tweets": first["tweets"] + rest["tweets"], "next_max_id": rest["next_max_id"]}
        )

    def _cold(self, owner: int, issued_at: float, query: TimelineQuery, page: Page) -> Response:
        """No timeline in Redis (or no Redis): answer from the database, and
        have the join rebuild the timeline when it is just this one missing.
        The database's page holds every write; its counts are the fanout
        job's, so a ``min_seq`` beyond the watermark waits for it first, as a
        page from Redis does (told ``X-Starling-Stale`` if it does not come)."""
        stale = False
        if query.min_seq is not None and page.generation is not None:
            target = min(query.min_seq, self.high_water())
            if page.watermark_seq < target:
                reached = self._reached(page.generation, target)
                stale = reached is None
                page = replace(page, watermark_seq=reached or page.watermark_seq)
        body = self.fallback(owner, issued_at, query)
        if body is None:
            return _revoked()
        headers = self._watermark_headers(page)
        headers[HEADER_SOURCE] = "fallback"
        if stale:
            headers[HEADER_STALE] = "true"
        if page.status == "cold" and page.generation is not None:
            try:
                self._request_regeneration(page.generation, owner)
            except Exception:  # the page is good; the next cold read asks again
                log.warning("could not request the regeneration of %d", owner, exc_info=True)
        return Response(200, body, headers)

    def _request_regeneration(self, generation: int, owner: int) -> None:
        # Claimed as "pending forever" first, so reads stay cold until the
        # regeneration's events are written and then applied by the job.
        store = self.store
        if not store.claim_regeneration(generation, owner, window=REGENERATION_WINDOW):
            return
        try:
            seq = self.regenerate(owner)
        except BaseException:
            store.release_regeneration(generation, owner)
            raise
        store.regenerating_until(generation, owner, seq, window=REGENERATION_WINDOW)

    def _watermark_headers(self, page: Page) -> dict[str, str]:
        if page.generation is None:
            return {HEADER_WATERMARK: "0"}
        now = self.wall()
        lag = max(0.0, page.applied_at - page.event_time) if page.event_time else 0.0
        age = max(0.0, now - page.applied_at) if page.applied_at else 0.0
        return {
            HEADER_WATERMARK: str(page.watermark_seq),
            HEADER_LAG: f"{lag:.3f}",
            HEADER_AGE: f"{age:.3f}",
        }


def handle(
    method: str,
    authorization: str,
    query_string: str,
    reader: TimelineReader,
    *,
    mentions: bool = False,
    list_id: int | None = None,
) -> Response:
    """``GET /api/v1/timeline`` (``GET /api/v1/mentions`` with ``mentions``,
    ``GET /api/v1/lists/{list_id}/timeline`` with ``list_id``) from its raw
    inputs: the signed-in user's own timeline. A list's id names its owner
    (fanout.model.owners), so another user's list is refused with no query;
    a list of the user's that is no more reads cold, and the database says
    so (404)."""
    if method not in ("GET", "HEAD"):
        return error(
            405, "method_not_allowed", f'Method "{method}" not allowed.', {"Allow": "GET, HEAD"}
        )
    challenge = {"WWW-Authenticate": 'Bearer realm="starling"'}
    try:
        token = bearer_token(authorization) if authorization else None
        if token is None:
            return error(
                401, "not_authenticated", "Authorization: Bearer <token> is required", challenge
            )
        user_id, issued_at = verify_token_cached(token)
    except InvalidToken as exc:
        return error(401, "authentication_failed", str(exc), challenge)
    try:
        query = parse_query(query_string)
    except InvalidParameter as exc:
        return error(400, "invalid", str(exc), fields={exc.name: [exc.message]})
    if list_id is not None:
        if not owners.is_list_id(list_id) or owners.user_of(-list_id) != user_id:
            return error(404, "not_found", f"no list {list_id}")  # lists are private
        owner = owners.list_owner(list_id)
    else:
        owner = -user_id if mentions else user_id
    try:
        return reader.read(user_id, issued_at, query, owner=owner)
    except NotFound as exc:  # a list deleted since
        return error(404, "not_found", str(exc))
