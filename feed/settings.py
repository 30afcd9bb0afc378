"""Django settings, all from the environment (12-factor).

The Starling variables (``REDIS_URL``, ``KAFKA_BOOTSTRAP_SERVERS``,
``STARLING_TOPIC_PREFIX``, ``STARLING_PARTITIONS``, ``TIMELINE_SIZE``,
``SPARK_MASTER``) are parsed once by :class:`fanout.config.StarlingConfig`,
the same parser Celery and the Spark jobs use; code reads ``settings.STARLING``.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from fanout import logs
from fanout.config import StarlingConfig

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("STARLING_VAR_DIR", BASE_DIR / "var"))


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = _bool("DJANGO_DEBUG", False)
# The fallback key is for a local `make run` only; production settings refuse it.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "insecure-dev-key-change-me-" + "x" * 32
ALLOWED_HOSTS = _list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = _list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

STARLING = StarlingConfig.from_env()

#: Lifetime of an API token (seconds).
STARLING_TOKEN_TTL = int(os.environ.get("STARLING_TOKEN_TTL", str(30 * 24 * 3600)))
#: How long a timeline read with ``min_seq`` waits for the fanout (seconds).
STARLING_READ_YOUR_WRITES_WAIT = float(os.environ.get("STARLING_READ_YOUR_WRITES_WAIT", "2"))
#: How often Celery beat sweeps the outbox (seconds), and how long published rows are kept.
STARLING_OUTBOX_SWEEP_SECONDS = float(os.environ.get("STARLING_OUTBOX_SWEEP_SECONDS", "2"))
STARLING_OUTBOX_RETENTION_DAYS = int(os.environ.get("STARLING_OUTBOX_RETENTION_DAYS", "7"))
#: How often Celery beat refills the timelines the fanout job found short (seconds).
STARLING_REFILL_SECONDS = float(os.environ.get("STARLING_REFILL_SECONDS", "1"))
# GET /metrics (feed.metrics): with a token set, a scrape needs "Authorization: Bearer
# <token>"; the production settings refuse to serve it without one. The figures that need
# SQL are refreshed by beat every STARLING_METRICS_REFRESH_SECONDS, never by a scrape.
STARLING_METRICS_TOKEN = os.environ.get("STARLING_METRICS_TOKEN", "")
STARLING_METRICS_REQUIRE_TOKEN = False
STARLING_METRICS_REFRESH_SECONDS = float(os.environ.get("STARLING_METRICS_REFRESH_SECONDS", "10"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "feed.apps.FeedConfig",
]

MIDDLEWARE = [
    "feed.middleware.RequestMetricsMiddleware",
    "feed.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "feed.urls"
WSGI_APPLICATION = "feed.wsgi.application"
AUTH_USER_MODEL = "feed.User"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'starling.sqlite3'}",
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
#: How long a write waits for a lock before it fails with 503 (seconds). SQLite
#: waits this long for the database's write lock; PostgreSQL for a row or table
#: lock (``lock_timeout``), so a locked database answers 503 instead of hanging.
DATABASE_LOCK_TIMEOUT = float(os.environ.get("DATABASE_LOCK_TIMEOUT", "20"))
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        f"-c lock_timeout={int(DATABASE_LOCK_TIMEOUT * 1000)}"
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run during a write; IMMEDIATE takes the write lock at
    # BEGIN so concurrent writers queue (busy timeout) instead of deadlocking.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": DATABASE_LOCK_TIMEOUT,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))

# Request size limit: a tweet is at most 280 characters; nothing we accept is big.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["feed.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "feed.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": [
        "feed.ratelimit.WriteUserThrottle",
        "feed.ratelimit.WriteIPThrottle",
    ],
    # Client addresses: REMOTE_ADDR, or the X-Forwarded-For entry this many proxies back.
    "NUM_PROXIES": int(os.environ["STARLING_NUM_PROXIES"])
    if os.environ.get("STARLING_NUM_PROXIES")
    else None,
}

#: Rate limits (feed/ratelimit.py): "<count>/<s|min|h|day>"; "0" turns one off.
STARLING_RATES = {
    "write_user": os.environ.get("STARLING_RATE_WRITE_USER", "60/min"),
    "write_ip": os.environ.get("STARLING_RATE_WRITE_IP", "600/min"),
    "login_ip": os.environ.get("STARLING_RATE_LOGIN_IP", "30/min"),
    "login_user": os.environ.get("STARLING_RATE_LOGIN_USER", "10/min"),
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Starling API",
    "DESCRIPTION": "A Twitter-style social feed: tweets, follows, home timelines.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from Starling's own static files (drf-spectacular-sidecar), not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "feed.schema.add_common_responses",
    ],
}

# Celery: Redis is its broker; results are not kept (tasks return nothing useful).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or STARLING.redis_url
CELERY_TASK_IGNORE_RESULT = True
# The worker logs through LOGGING below (its format, LOG_FORMAT=json included).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
CELERY_BEAT_SCHEDULE = {
    "sweep-outbox": {
        "task": "feed.tasks.relay_outbox",
        "schedule": STARLING_OUTBOX_SWEEP_SECONDS,
        "options": {"expires": STARLING_OUTBOX_SWEEP_SECONDS * 5},
    },
    "prune-outbox": {"task": "feed.tasks.prune_outbox", "schedule": 3600.0},
    "drop-idle-timelines": {"task": "feed.tasks.drop_idle_timelines", "schedule": 3600.0},
    "refill-timelines": {
        "task": "feed.tasks.refill_timelines",
        "schedule": STARLING_REFILL_SECONDS,
        "options": {"expires": STARLING_REFILL_SECONDS * 5},
    },
    "refresh-metrics": {
        "task": "feed.tasks.refresh_metrics",
        "schedule": STARLING_METRICS_REFRESH_SECONDS,
        "options": {"expires": STARLING_METRICS_REFRESH_SECONDS * 3},
    },
}

# LOG_FORMAT=json: one JSON object per line, with the request id (fanout.logs).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": logs.PLAIN}, "json": {"()": "fanout.logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": logs.log_format()}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # A relay pass every few seconds is routine: do not log each task.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
    },
}
