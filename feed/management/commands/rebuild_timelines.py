"""``manage.py rebuild_timelines``: recompute every home timeline (spark.rebuild.stages).

The one way in to the rebuild, for operators and for the admin's Celery
task: it hands the Spark code the database queries it verifies against.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from feed import services
from feed.selectors import home_timeline_oracle, settled_since
from spark.rebuild import command as rebuild_command


class Command(BaseCommand):
    help = (
        "Recompute every home timeline from the changelogs into a new generation, verify it, "
        "and switch to it atomically (--dry-run: only report the differences)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        rebuild_command.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        code = rebuild_command.execute(
            argparse.Namespace(**options),
            oracle=home_timeline_oracle,
            settled=settled_since,
            prepare=None if options["dry_run"] else _restore_revocations,
        )
        if code:
            # The lines above say why, and what became of the live timelines.
            raise CommandError("rebuild failed", returncode=code)


def _restore_revocations() -> str:
    """A rebuild may follow a Redis loss: put the token revocations back first."""
    restored = services.revocations_restore()
    return f"token revocations in Redis: {restored} restored from the database"
