"""Rate limits on writes and logins, counted in Redis.

Fixed windows counted atomically: one script call increments the window's
counter and starts its expiry on the first hit, and returns the count and
the time left, so every web worker and process shares one count. Over the
limit, DRF answers 429 with ``Retry-After`` (the seconds left in the window).

| scope | who is counted | applies to |
| --- | --- | --- |
| ``write_user`` | the authenticated user | POST / PUT / PATCH / DELETE |
| ``write_ip`` | the client address | POST / PUT / PATCH / DELETE |
| ``login_ip`` | the client address | ``auth/token``, ``auth/register`` |
| ``login_user`` | the username tried | ``auth/token`` |

Limits come from ``settings.STARLING_RATES`` (``"60/min"``; empty or ``0``
turns a scope off). If Redis is unreachable the limiter lets requests
through (and logs it): a limiter outage must not stop the service. Home
timeline reads are not limited here: that would add a Redis round trip to
the one the read makes; limit them at the proxy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from fanout.config import StarlingConfig
from fanout.procs import per_process
from fanout.store import keys
from fanout.store.redis_conn import connect
from fanout.store.scripts import Script

log = logging.getLogger(__name__)

_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@per_process
def _window_script(config: StarlingConfig) -> Script:
    """The counting script (``fanout/store/lua/rate_limit.lua``) on the process's
    client for the configuration's Redis, made once, not per request."""
    return Script(connect(config), "rate_limit")


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: int

    @classmethod
    def parse(cls, text: str | None) -> Rate | None:
        """``"60/min"`` → Rate(60, 60); None for off (empty, ``0``)."""
        if not text or text.strip() in {"0", "off"}:
            return None
        count, _, unit = text.strip().partition("/")
        if not count.isdigit() or unit not in _UNITS:
            raise ValueError(f"rate {text!r} is not like '60/min' (units: s, min, h, day)")
        return cls(int(count), _UNITS[unit]) if int(count) > 0 else None


class RedisRateThrottle(BaseThrottle):
    scope = ""

    def ident(self, request: Request, view: Any) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        rate = Rate.parse(settings.STARLING_RATES.get(self.scope))
        ident = self.ident(request, view) if rate else None
        if rate is None or ident is None:
            return True
        key = keys.rate_limit(self.scope, ident)
        try:
            script = _window_script(settings.STARLING)
            count, ttl_ms = script(keys=[key], args=[rate.seconds * 1000])
        except redis.RedisError as exc:
            log.warning("rate limiter unavailable, letting the request through: %s", exc)
            return True
        self._wait = max(1, -(-int(ttl_ms) // 1000))  # whole seconds, rounded up
        return int(count) <= rate.count

    def wait(self) -> float | None:
        return float(getattr(self, "_wait", 1))


class WriteUserThrottle(RedisRateThrottle):
    scope = "write_user"

    def ident(self, request: Request, view: Any) -> str | None:
        if request.method not in WRITE_METHODS or not getattr(request.user, "pk", None):
            return None
        return str(request.user.pk)


class WriteIPThrottle(RedisRateThrottle):
    scope = "write_ip"

    def ident(self, request: Request, view: Any) -> str | None:
        return self.get_ident(request) if request.method in WRITE_METHODS else None


class LoginIPThrottle(RedisRateThrottle):
    scope = "login_ip"

    def ident(self, request: Request, view: Any) -> str | None:
        return self.get_ident(request)


class LoginUserThrottle(RedisRateThrottle):
    scope = "login_user"

    def ident(self, request: Request, view: Any) -> str | None:
        data = request.data if isinstance(request.data, dict) else {}
        username = data.get("username")
        return (
            str(username).strip().lower()[:150] if isinstance(username, str) and username else None
        )
