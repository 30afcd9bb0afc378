"""The WSGI fast path for ``GET /api/v1/timeline``, ``GET /api/v1/mentions``
and ``GET /api/v1/lists/{id}/timeline`` (and the door for ``/metrics``).

The hottest endpoints skip Django's middleware and URL resolving: this
wrapper answers those paths with :func:`feed.timeline.handle` and hands
every other request to Django. What the
skipped middleware would have done for them is done here: the ``Host``
header is checked against ``ALLOWED_HOSTS`` and the security headers are
``SecurityMiddleware``'s own (computed once); a plain-HTTP request that
``SECURE_SSL_REDIRECT`` would redirect is handed to Django, which does.
``/metrics`` is answered here too, before Django's host check and TLS
redirect (feed.metrics.answer says why).
Measured on this machine: docs/performance.md.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core import signals
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.middleware.security import SecurityMiddleware

from fanout.logs import request_scope
from feed import metrics, timeline
from feed.middleware import HEADER

log = logging.getLogger(__name__)

PATH = "/api/v1/timeline"
#: The signed-in user's mentions: read as the home timeline is (feed.timeline).
MENTIONS_PATH = "/api/v1/mentions"
#: The paths answered here, and whether each is the mentions'.
PATHS = {PATH: False, MENTIONS_PATH: True}
#: A list's timeline: read as the home timeline is, its id in the path.
LIST_PATH = re.compile(r"/api/v1/lists/(\d{1,16})/timeline")
#: The list timelines' path in the metrics (one series, whatever the list).
LIST_LABEL = "/api/v1/lists/{id}/timeline"
StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _Probe(HttpRequest):
    """A request of the given scheme, for Django's SecurityMiddleware to answer."""

    def __init__(self, secure: bool) -> None:
        super().__init__()
        self.secure = secure
        self.path = self.path_info = PATH
        self.META = {"SERVER_NAME": "localhost", "SERVER_PORT": "443" if secure else "80"}

    def is_secure(self) -> bool:
        return self.secure


def _security_headers(secure: bool) -> list[tuple[str, str]]:
    """The headers Django's SecurityMiddleware puts on a response to a request
    of this scheme: the one source of them (HSTS and its options, nosniff,
    referrer and opener policies), computed once per process."""
    response = SecurityMiddleware(lambda request: HttpResponse())(_Probe(secure))
    assert isinstance(response, HttpResponse)  # the middleware ran synchronously
    return [(name, value) for name, value in response.items() if name != "Content-Type"]


def _is_secure(environ: dict[str, Any]) -> bool:
    """Django's ``HttpRequest.is_secure`` on a WSGI environ: the proxy's header
    when ``SECURE_PROXY_SSL_HEADER`` names one, else the server's scheme."""
    if settings.SECURE_PROXY_SSL_HEADER:
        header, value = settings.SECURE_PROXY_SSL_HEADER
        return str(environ.get(header, "")).split(",")[0].strip() == value
    return environ.get("wsgi.url_scheme") == "https"


class TimelineFastPath:
    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.security_headers = {True: _security_headers(True), False: _security_headers(False)}
        self.allowed_hosts = list(settings.ALLOWED_HOSTS)
        self._good_hosts: set[str] = set()  # Host values already validated

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == metrics.PATH:
            return self._metrics(environ, start_response)
        path = environ.get("PATH_INFO", "")
        listed = LIST_PATH.fullmatch(path) if path not in PATHS else None
        if path not in PATHS and listed is None:
            return self.app(environ, start_response)
        from feed.readpath import timeline_reader

        secure = _is_secure(environ)
        if settings.SECURE_SSL_REDIRECT and not secure:
            return self.app(environ, start_response)  # Django's redirect to HTTPS
        started = time.perf_counter()
        with request_scope(environ.get("HTTP_X_REQUEST_ID")) as rid:
            response = self._answer(
                environ,
                timeline_reader,
                mentions=PATHS.get(path, False),
                list_id=int(listed.group(1)) if listed else None,
            )
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(response.body))),
            (HEADER, rid),
            *self.security_headers[secure],
            *response.headers.items(),
        ]
        start_response(f"{response.status} {HTTPStatus(response.status).phrase}", headers)
        method = environ.get("REQUEST_METHOD", "GET")
        label = LIST_LABEL if listed else path
        metrics.observe_request(label, method, response.status, time.perf_counter() - started)
        return [b"" if method == "HEAD" else response.body]

    def _metrics(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        status, content_type, body = metrics.answer(
            environ.get("HTTP_AUTHORIZATION", ""), environ.get("HTTP_ACCEPT", "")
        )
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [body]

    def _answer(
        self,
        environ: dict[str, Any],
        reader: Callable[[], Any],
        *,
        mentions: bool,
        list_id: int | None,
    ) -> timeline.Response:
        host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
        if host not in self._good_hosts and not self._host_ok(host):
            return timeline.error(400, "bad_request", f"invalid Host header: {host[:100]!r}")
        try:
            return timeline.handle(
                environ.get("REQUEST_METHOD", "GET"),
                environ.get("HTTP_AUTHORIZATION", ""),
                environ.get("QUERY_STRING", ""),
                reader(),
                mentions=mentions,
                list_id=list_id,
            )
        except Exception:
            log.exception("timeline read failed")
            return timeline.error(500, "server_error", "internal server error")
        finally:
            # Some reads query the database (cold timelines, deep pages):
            # Django then recycles the connection as after its own views.
            if any(c.connection is not None for c in connections.all(initialized_only=True)):
                signals.request_finished.send(sender=self.__class__)

    def _host_ok(self, host: str) -> bool:
        domain, _ = split_domain_port(host)
        if not domain or not validate_host(domain, self.allowed_hosts):
            return False
        if len(self._good_hosts) < 64:
            self._good_hosts.add(host)
        return True
