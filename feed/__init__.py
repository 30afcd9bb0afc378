"""Starling's Django project and app: settings, models, write use-cases, API, admin."""

from feed.celery import app as celery_app

__all__ = ["celery_app"]
