"""Test clients that reach the timelines the way production does.

``GET /api/v1/timeline``, ``/mentions`` (and ``/metrics``) are answered by the
WSGI fast path in front of Django (:mod:`feed.fastpath`), not by a Django
view. Django's test client calls Django's handler directly, so
:class:`StarlingClient` hands those paths to the fast path and everything
else to Django, as
``feed.wsgi.application`` does.
"""

from __future__ import annotations

from typing import Any

from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.http import HttpResponse
from rest_framework.test import APIClient, ForceAuthClientHandler

from feed import fastpath, metrics
from feed.auth import issue_token

_FAST_PATHS = {*fastpath.PATHS, metrics.PATH}


class _FastPathHandler(ForceAuthClientHandler):
    """DRF's test handler with the fast path in front of it."""

    def __call__(self, environ: dict[str, Any]) -> HttpResponse:
        path = environ.get("PATH_INFO", "")
        if path not in _FAST_PATHS and not fastpath.LIST_PATH.fullmatch(path):
            return super().__call__(environ)
        handed_on: list[HttpResponse] = []
        django = super().__call__

        def to_django(env: dict[str, Any], start_response: Any) -> list[bytes]:
            handed_on.append(django(env))
            return []

        answered: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
            answered.update(status=int(status.split()[0]), headers=headers)

        # Built per request: the fast path reads settings a test may override.
        app = fastpath.TimelineFastPath(to_django)
        # As Django's test handler does: the test's transaction keeps its connection.
        request_finished.disconnect(close_old_connections)
        try:
            body = b"".join(app(environ, start_response))
        finally:
            request_finished.connect(close_old_connections)
        if handed_on:
            return handed_on[0]
        response = HttpResponse(body, status=answered["status"])
        for name, value in answered["headers"]:
            response[name] = value
        response.wsgi_request = WSGIRequest(environ)  # what Django's test client reads back
        return response


class StarlingClient(APIClient):
    """DRF's test client, with the timeline answered by the fast path."""

    def __init__(self, enforce_csrf_checks: bool = False, **defaults: Any) -> None:
        super().__init__(enforce_csrf_checks, **defaults)
        self.handler = _FastPathHandler(enforce_csrf_checks)


def client_for(user: Any = None) -> StarlingClient:
    """A client signed in as ``user`` with a bearer token (anonymous for None)."""
    client = StarlingClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(user)}")
    return client
