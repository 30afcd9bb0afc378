"""Test settings: production settings plus a fast password hasher.

The services (Kafka, Redis) are injected per test by the fixtures in
``tests/conftest.py`` through ``settings.STARLING``.
"""

import os
import secrets
from dataclasses import replace

# The suite's own key (feed.settings refuses to start without one); the
# stack's processes inherit it.
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(64))

from feed.settings import *  # noqa: F403

# Nothing listens on port 1: in the test process, code that talks to Redis or
# Kafka without the fixtures of tests/conftest.py (which start the session's
# own servers) fails loudly instead of using whatever runs on this machine's
# default ports. The stack's processes (tests/support/stack.py) name their servers.
if not os.environ.get("REDIS_URL"):
    STARLING = replace(STARLING, redis_url="redis://127.0.0.1:1/0")  # noqa: F405
if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
    STARLING = replace(STARLING, kafka_bootstrap_servers="127.0.0.1:1")

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Serve admin assets from the apps (no collectstatic needed in tests).
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True

# Rate limits off; tests of the limiter set them (tests/web/test_ratelimit.py).
STARLING_RATES = dict.fromkeys(STARLING_RATES, "0")  # noqa: F405
