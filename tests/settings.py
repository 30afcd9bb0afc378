"""Test settings: production settings plus a fast password hasher.

The services (Kafka, Redis) are injected per test by the fixtures in
``tests/conftest.py`` through ``settings.STARLING``.
"""

from feed.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Serve admin assets from the apps (no collectstatic needed in tests).
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True

# Rate limits off; tests of the limiter set them (tests/integration/test_ratelimit.py).
STARLING_RATES = dict.fromkeys(STARLING_RATES, "0")  # noqa: F405
