"""``manage.py drop_idle_timelines``: what Celery beat runs every hour, now."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from feed.tasks import drop_idle_timelines


class Command(BaseCommand):
    help = (
        "Drop the timelines of users with no read and no sign-in for STARLING_ACTIVE_DAYS "
        "(after a rebuild, say); their next read regenerates them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help='print {"dropped": n}')

    def handle(self, *args: Any, **options: Any) -> None:
        dropped = drop_idle_timelines()
        if options["json"]:
            self.stdout.write(json.dumps({"dropped": dropped}))
        else:
            days = settings.STARLING.active_days
            self.stdout.write(f"dropped {dropped} timelines of users idle for {days} days")
