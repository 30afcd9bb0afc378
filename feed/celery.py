"""The Celery app: runs the outbox relay (triggered on commit, swept by beat)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")

app = Celery("starling")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["feed"])
