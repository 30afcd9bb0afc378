"""The home-timeline read (DESIGN.md decision 7): one Redis round trip, no SQL.

:func:`handle` is the whole endpoint, free of any web framework: it takes
the request's method, ``Authorization`` header and query string and returns
status, headers and body. Two callers share it: the WSGI fast path in
:mod:`feed.wsgi` (what production traffic hits: no Django middleware, no
URL resolving) and :class:`feed.apis.TimelineApi` (the same URL inside
Django, for the test client, the OpenAPI schema and ``runserver``).

A warm read is one call of the timeline store's read script (active
generation, token revocation, the page of ids by cursor, the bodies, the
watermark, the JSON assembled in Redis), after an HMAC check of the token.
The database is touched only for a *cold* timeline (missing in the active
generation): a bounded fallback query answers, and the timeline is
regenerated through the join by re-publishing the user's follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import orjson
import redis

from fanout import ids
from fanout.timelines import Page, TimelineStore
from feed.auth import InvalidToken, bearer_token, verify_token_cached

MAX_COUNT = 200
DEFAULT_COUNT = 50
#: A regeneration is asked for at most once per user and window.
REGENERATION_WINDOW = 60

HEADER_SOURCE = "X-Starling-Source"  # redis | fallback
HEADER_WATERMARK = "X-Starling-Watermark"  # highest outbox seq the timelines reflect
HEADER_LAG = "X-Starling-Fanout-Lag"  # seconds from Kafka to Redis for the newest applied event
HEADER_AGE = "X-Starling-Watermark-Age"  # seconds since the fanout job last applied a batch
HEADER_STALE = "X-Starling-Stale"  # "true": min_seq was not reached in time


class InvalidParameter(ValueError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class TimelineQuery:
    count: int = DEFAULT_COUNT
    max_id: int | None = None
    since_id: int | None = None
    min_seq: int | None = None


def _int(params: Mapping[str, list[str]], name: str, low: int, high: int) -> int | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise InvalidParameter(name, "give it once")
    raw = values[0].strip()
    if not raw.isdigit() or len(raw) > 20:
        raise InvalidParameter(name, f"must be a whole number, got {raw[:30]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidParameter(name, f"must be between {low} and {high}, got {value}")
    return value


def parse_query(query_string: str) -> TimelineQuery:
    params = parse_qs(query_string, keep_blank_values=True)
    count = _int(params, "count", 1, MAX_COUNT)
    return TimelineQuery(
        count=DEFAULT_COUNT if count is None else count,
        max_id=_int(params, "max_id", 1, ids.MAX_ID),
        since_id=_int(params, "since_id", 1, ids.MAX_ID),
        min_seq=_int(params, "min_seq", 0, 2**63 - 1),
    )


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def error(status: int, code: str, message: str, **headers: str) -> Response:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return Response(status, body, dict(headers))


def _revoked() -> Response:
    return error(
        401,
        "authentication_failed",
        "token has been revoked or the user deactivated; request a new one",
        **{"WWW-Authenticate": 'Bearer realm="starling"'},
    )


#: Fallback(user_id, issued_at, query) -> the page body (JSON bytes), from the
#: database; None when the user or the token is no longer valid there.
Fallback = Callable[[int, float, TimelineQuery], bytes | None]
#: Regenerate(user_id) -> the outbox seq after which the timeline is complete.
Regenerate = Callable[[int], int]


@dataclass
class TimelineReader:
    store: TimelineStore
    fallback: Fallback
    regenerate: Regenerate
    max_wait: float = 2.0
    poll: float = 0.02
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    wall: Callable[[], float] = time.time

    def read(self, user_id: int, issued_at: float, query: TimelineQuery) -> Response:
        deadline = self.clock() + self.max_wait
        while True:
            try:
                page = self.store.read_page(
                    user_id,
                    count=query.count,
                    max_id=query.max_id,
                    since_id=query.since_id,
                    issued_at=issued_at,
                )
            except redis.RedisError:
                return self._cold(user_id, issued_at, query, Page("unavailable"))
            if page.status == "revoked":
                return _revoked()
            if page.status != "ok":
                return self._cold(user_id, issued_at, query, page)
            behind = query.min_seq is not None and page.watermark_seq < query.min_seq
            if not behind or self.clock() >= deadline:
                break
            self.sleep(self.poll)
        headers = self._watermark_headers(page)
        headers[HEADER_SOURCE] = "redis"
        if behind:
            headers[HEADER_STALE] = "true"
        return Response(200, page.body, headers)

    def _cold(self, user_id: int, issued_at: float, query: TimelineQuery, page: Page) -> Response:
        """No timeline in Redis (or no Redis): answer from the database, and
        have the join rebuild the timeline when it is just this one missing."""
        body = self.fallback(user_id, issued_at, query)
        if body is None:
            return _revoked()
        headers = self._watermark_headers(page)
        headers[HEADER_SOURCE] = "fallback"
        if page.status == "cold" and page.generation is not None:
            self._request_regeneration(page.generation, user_id)
        return Response(200, body, headers)

    def _request_regeneration(self, generation: int, user_id: int) -> None:
        key = f"starling:regen:{generation}:{user_id}"
        client = self.store.redis
        # Claimed as "pending forever" first, so reads stay cold until the
        # regeneration's events are written and then applied by the job.
        if not client.set(key, ids.MAX_ID, nx=True, ex=REGENERATION_WINDOW):
            return
        try:
            seq = self.regenerate(user_id)
        except Exception:
            client.delete(key)
            raise
        client.set(key, seq, ex=REGENERATION_WINDOW)

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


def handle(method: str, authorization: str, query_string: str, reader: TimelineReader) -> Response:
    """``GET /api/v1/timeline`` from its raw inputs."""
    if method not in ("GET", "HEAD"):
        return error(
            405, "method_not_allowed", f'Method "{method}" not allowed.', Allow="GET, HEAD"
        )
    challenge = {"WWW-Authenticate": 'Bearer realm="starling"'}
    try:
        token = bearer_token(authorization) if authorization else None
        if token is None:
            return error(
                401, "not_authenticated", "Authorization: Bearer <token> is required", **challenge
            )
        user_id, issued_at = verify_token_cached(token)
    except InvalidToken as exc:
        return error(401, "authentication_failed", str(exc), **challenge)
    try:
        query = parse_query(query_string)
    except InvalidParameter as exc:
        response = error(400, "invalid", str(exc))
        response.body = orjson.dumps(
            {"error": {"code": "invalid", "message": str(exc), "fields": {exc.name: [exc.message]}}}
        )
        return response
    return reader.read(user_id, issued_at, query)
