"""The timeline's WSGI fast path answers with Django's security headers and
redirects as Django does: one source for both (Django's SecurityMiddleware)."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest
from django.core.wsgi import get_wsgi_application

from feed.auth import issue_token
from feed.fastpath import TimelineFastPath
from tests.support.factories import UserFactory

pytestmark = pytest.mark.django_db

HARDENED = {
    "SECURE_HSTS_SECONDS": 3600,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SECURE_HSTS_PRELOAD": True,
    "SECURE_SSL_REDIRECT": True,
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
}


def _get(app: Any, path: str, *, https: bool, token: str = "") -> tuple[str, dict[str, str]]:
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }
    if https:
        environ["HTTP_X_FORWARDED_PROTO"] = "https"
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    answer: list[Any] = []
    b"".join(app(environ, lambda status, headers, *_: answer.extend([status, headers])))
    return answer[0], dict(answer[1])


SECURITY = (
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
)


@pytest.mark.parametrize("hardened", [False, True], ids=["development", "production"])
def test_the_fast_path_sends_django_s_security_headers(settings, starling, hardened) -> None:
    if hardened:
        for name, value in HARDENED.items():
            setattr(settings, name, value)
    app = TimelineFastPath(get_wsgi_application())
    token = issue_token(UserFactory(username="ann"))
    status, fast = _get(app, "/api/v1/timeline", https=True, token=token)
    _, django = _get(app, "/api/v1/users/ann", https=True)
    assert status.startswith("200")
    assert {h: fast.get(h) for h in SECURITY} == {h: django.get(h) for h in SECURITY}
    if hardened:
        assert fast["Strict-Transport-Security"] == "max-age=3600; includeSubDomains; preload"


def test_plain_http_to_the_fast_path_is_redirected_like_any_path(settings, starling) -> None:
    for name, value in HARDENED.items():
        setattr(settings, name, value)
    app = TimelineFastPath(get_wsgi_application())
    status, headers = _get(app, "/api/v1/timeline", https=False)
    assert status.startswith("301")
    assert headers["Location"] == "https://testserver/api/v1/timeline"
    assert "Strict-Transport-Security" not in headers
