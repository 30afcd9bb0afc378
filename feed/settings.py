"""Django settings, all from the environment (12-factor).

Every variable is read through :class:`fanout.config.Env` (typed, bounded, a
message naming the variable when it is wrong), and the shared ones once by
:class:`fanout.config.StarlingConfig`, the same parser Celery and the Spark
jobs use; code reads ``settings.STARLING``.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from fanout import logs
from fanout.config import LOG_LEVELS, ConfigError, Env, StarlingConfig

BASE_DIR = Path(__file__).resolve().parent.parent
env = Env()
VAR_DIR = Path(env.text("STARLING_VAR_DIR", str(BASE_DIR / "var")))
#: Where ``make run`` keeps the key it generated for this checkout (feed.devstack.secret).
SECRET_KEY_FILE = VAR_DIR / "secret_key"


def _secret_key() -> str:
    """``DJANGO_SECRET_KEY``, or the key ``make run`` generated for this
    checkout's state directory; never a key written in the repository."""
    key = env.text("DJANGO_SECRET_KEY")
    if not key and SECRET_KEY_FILE.is_file():
        key = SECRET_KEY_FILE.read_text().strip()
    if not key:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set: set it (python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(64))') or name a file holding it in "
            f"DJANGO_SECRET_KEY_FILE, or run `make run` once, which keeps one in {SECRET_KEY_FILE}"
        )
    return key


try:
    DEBUG = env.bool("DJANGO_DEBUG", False)
    SECRET_KEY = _secret_key()
    ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
    CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS")

    STARLING = StarlingConfig.from_env()

    #: Lifetime of an API token (seconds).
    STARLING_TOKEN_TTL = env.int(
        "STARLING_TOKEN_TTL", 30 * 24 * 3600, low=60, high=10 * 365 * 86400
    )
    #: How long a timeline read with ``min_seq`` waits for the fanout (seconds).
    STARLING_READ_YOUR_WRITES_WAIT = env.float(
        "STARLING_READ_YOUR_WRITES_WAIT", 2.0, low=0.0, high=60.0
    )
    #: How long published outbox rows are kept (days).
    STARLING_OUTBOX_RETENTION_DAYS = env.int("STARLING_OUTBOX_RETENTION_DAYS", 7, low=1, high=3650)
    # GET /metrics (feed.metrics): with a token set, a scrape needs "Authorization: Bearer
    # <token>"; the production settings refuse to serve it without one.
    STARLING_METRICS_TOKEN = env.text("STARLING_METRICS_TOKEN")
    DATABASE_URL = env.text("DATABASE_URL", f"sqlite:///{VAR_DIR / 'starling.sqlite3'}")
    #: The database's password apart from DATABASE_URL (or DATABASE_PASSWORD_FILE: a
    #: secret file), so that the URL itself holds no secret.
    DATABASE_PASSWORD = env.text("DATABASE_PASSWORD")
    DATABASE_CONN_MAX_AGE = env.int("DATABASE_CONN_MAX_AGE", 60, low=0, high=86400)
    DATABASE_LOCK_TIMEOUT = env.float("DATABASE_LOCK_TIMEOUT", 20.0, low=0.1, high=600.0)
    STATIC_ROOT = Path(env.text("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
    #: Client addresses (feed.ratelimit): the socket's, unless proxies are trusted
    #: (this many in front, each appending to X-Forwarded-For).
    STARLING_NUM_PROXIES = env.int("STARLING_NUM_PROXIES", 0, low=0, high=10)
    #: Rate limits (feed/ratelimit.py): "<count>/<s|min|h|day>"; "0" turns one off.
    STARLING_RATES = {
        "write_user": env.text("STARLING_RATE_WRITE_USER", "60/min"),
        "write_ip": env.text("STARLING_RATE_WRITE_IP", "600/min"),
        "login_ip": env.text("STARLING_RATE_LOGIN_IP", "30/min"),
        "login_user": env.text("STARLING_RATE_LOGIN_USER", "10/min"),
    }
    CELERY_BROKER_URL = env.text("CELERY_BROKER_URL") or STARLING.redis_url
    STARLING_LOG_LEVEL = env.choice("STARLING_LOG_LEVEL", "info", LOG_LEVELS).upper()
except ConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None

STARLING_METRICS_REQUIRE_TOKEN = False
#: Beat's periods (seconds): the outbox sweep (a fallback: every commit queues the
#: relay at once), the refill of timelines left short (a refill waits at most this
#: long before its query), the database figures of /metrics (a scrape runs no SQL).
STARLING_OUTBOX_SWEEP_SECONDS = 2.0
STARLING_REFILL_SECONDS = 1.0
STARLING_METRICS_REFRESH_SECONDS = 10.0
STARLING_REVOCATIONS_SECONDS = 60.0

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
        DATABASE_URL,
        conn_max_age=DATABASE_CONN_MAX_AGE,
        conn_health_checks=True,
    )
}
if DATABASE_PASSWORD:
    if DATABASES["default"].get("PASSWORD"):
        raise ImproperlyConfigured(
            "DATABASE_URL has a password and so does DATABASE_PASSWORD: set only one"
        )
    DATABASES["default"]["PASSWORD"] = DATABASE_PASSWORD
#: How long a write waits for a lock before it fails with 503 (seconds). SQLite
#: waits this long for the database's write lock; PostgreSQL for a row or table
#: lock (``lock_timeout``), so a locked database answers 503 instead of hanging.
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
    "NUM_PROXIES": STARLING_NUM_PROXIES,
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
        "feed.schema.add_timelines",
        "feed.schema.add_common_responses",
    ],
}

# Celery: Redis is its broker; results are not kept (tasks return nothing useful).
CELERY_TASK_IGNORE_RESULT = True
# The worker logs through LOGGING below (its format, STARLING_LOG_FORMAT=json included).
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
    # A revocation whose copy to Redis failed after its commit is repaired within this
    # period (a minute: one SET per revocation in force, pipelined per 1,000).
    "restore-revocations": {
        "task": "feed.tasks.restore_revocations",
        "schedule": STARLING_REVOCATIONS_SECONDS,
    },
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

# STARLING_LOG_FORMAT=json: one JSON object per line, with the request id (fanout.logs).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": logs.PLAIN}, "json": {"()": "fanout.logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": logs.log_format()}},
    "root": {"handlers": ["console"], "level": STARLING_LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # A relay pass every few seconds is routine: do not log each task.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.beat": {"level": "WARNING"},
    },
}
