"""Django middleware of Starling's own."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from fanout.logs import request_scope

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
