"""WSGI entry point (granian / gunicorn serve ``feed.wsgi:application``).

The home timeline is answered by a fast path in front of Django
(:mod:`feed.fastpath`); everything else is Django.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")
django_application = get_wsgi_application()

from feed.fastpath import TimelineFastPath  # noqa: E402  (after Django is set up)

application = TimelineFastPath(django_application)
