"""Production settings: the base settings, hardened (``manage.py check --deploy`` is clean).

Selected with ``DJANGO_SETTINGS_MODULE=feed.settings_production`` (the Docker image and
``docker-compose.yml`` do). Everything still comes from the environment; on top of
:mod:`feed.settings` this module

* turns ``DEBUG`` off whatever ``DJANGO_DEBUG`` says;
* refuses to start without ``DJANGO_SECRET_KEY`` or ``DJANGO_SECRET_KEY_FILE`` (a
  development key, any key Django's deploy check would call weak, and the key file
  ``make run`` keeps are refused) and without ``DJANGO_ALLOWED_HOSTS``;
* assumes TLS ends at a reverse proxy that sets ``X-Forwarded-Proto`` (configurable), sends
  HSTS, redirects plain HTTP to HTTPS (except the health check) and marks cookies secure;
* serves static files with WhiteNoise from a manifest of hashed, compressed files
  (``collectstatic`` runs when the image is built).

docs/deploy.md lists the variables.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from fanout.config import ConfigError, Env

env = Env()
#: Development keys' prefixes (Django's own, and the one Starling's docs once showed).
_DEV_KEY_PREFIXES = ("insecure-dev-key-change-me-", "django-insecure-")


def _required(name: str) -> str:
    try:
        value = env.text(name)
    except ConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    if not value:
        raise ImproperlyConfigured(
            f"{name} must be set in production, or {name}_FILE name a file holding it "
            "(see docs/deploy.md)"
        )
    return value


def _secret_key() -> str:
    key = _required("DJANGO_SECRET_KEY")
    if key.startswith(_DEV_KEY_PREFIXES):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is a development key: generate a new one")
    # The rule of Django's security.W009, enforced: a weak key would sign every API token.
    if len(key) < 50 or len(set(key)) < 5:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be at least 50 characters with at least 5 distinct ones"
        )
    return key


# Checked before the base settings, which would also take the key file of `make run`.
_KEY = _secret_key()

from feed.settings import *  # noqa: E402, F403

DEBUG = False
SECRET_KEY = _KEY
# Old keys still accepted for verifying signatures (API tokens) while a key is rotated.
SECRET_KEY_FALLBACKS = env.list("DJANGO_SECRET_KEY_FALLBACKS", "")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", "")
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "DJANGO_ALLOWED_HOSTS must be set in production (see docs/deploy.md)"
    )

# TLS ends at the reverse proxy in front of the web containers, which must set
# X-Forwarded-Proto (and strip any the client sent). Without a proxy, set
# DJANGO_SECURE_PROXY_SSL_HEADER=false and terminate TLS some other way.
if env.bool("DJANGO_SECURE_PROXY_SSL_HEADER", True):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", True)
# Container and load-balancer health checks speak plain HTTP to the container.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]
SECURE_HSTS_SECONDS = env.int(
    "DJANGO_SECURE_HSTS_SECONDS", 365 * 24 * 3600, low=0, high=10 * 365 * 24 * 3600
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True

# /metrics tells a lot about the service: served only to who has STARLING_METRICS_TOKEN.
STARLING_METRICS_REQUIRE_TOKEN = True

SILENCED_SYSTEM_CHECKS = [
    # HSTS preload puts the domain into browsers' built-in lists, which takes months to
    # undo: the domain owner's decision (DJANGO_SECURE_HSTS_PRELOAD=true), not a default.
    "security.W021",
]

# Static files (admin, Swagger UI): hashed, compressed names, served by WhiteNoise, which
# the base settings already put in MIDDLEWARE; STATIC_ROOT comes from the environment.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
