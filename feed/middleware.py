"""Django middleware of Starling's own."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from fanout.logs import request_scope
from feed import metrics

HEADER = "X-Request-ID"


class RequestIdMiddleware:
    """Every request runs under an id (the client's ``X-Request-ID`` if it
    looks like one, else a new one): its log records carry it, and the
    response tells it back. The timeline's fast path does the same
    (feed.fastpath)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with request_scope(request.headers.get(HEADER)) as rid:
            response = self.get_response(request)
        response[HEADER] = rid
        return response


def route_of(request: HttpRequest) -> str:
    """The URL pattern a request matched (``/api/v1/tweets/<int:pk>``), not
    its path: one label value per route, however many ids clients send."""
    match = getattr(request, "resolver_match", None)
    return "/" + match.route if match is not None and match.route else metrics.UNMATCHED


class RequestMetricsMiddleware:
    """Times every request Django answers, by route, method and status
    (``starling_http_request_duration_seconds``); first in MIDDLEWARE, so the
    time includes the other middleware. The timeline's fast path records its
    own requests the same way (feed.fastpath)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        metrics.observe_request(
            route_of(request),
            request.method or "GET",
            response.status_code,
            time.perf_counter() - started,
        )
        return response
