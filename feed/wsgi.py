"""WSGI entry point (granian / gunicorn serve ``feed.wsgi:application``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")
application = get_wsgi_application()
