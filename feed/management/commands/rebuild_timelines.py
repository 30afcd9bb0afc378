"""``manage.py rebuild_timelines``: recompute every home timeline (spark.rebuild)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from feed.selectors import home_timeline_oracle, settled_since
from spark import rebuild


class Command(BaseCommand):
    help = (
        "Recompute every home timeline from the changelogs into a new generation, verify it, "
        "and switch to it atomically (--dry-run: only report the differences)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        rebuild.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        code = rebuild.execute(
            argparse.Namespace(**options),
            oracle=home_timeline_oracle,
            settled=settled_since,
            out=sys.stdout,
        )
        if code:
            raise CommandError("rebuild failed; the live timelines are untouched", returncode=code)
