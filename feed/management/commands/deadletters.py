"""``manage.py deadletters``: the changelog records the fanout job set aside."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from fanout.store.timelines import store_for


def _preview(raw: str | None, width: int = 60) -> str:
    if raw is None:
        return "(null)"
    data = base64.b64decode(raw)
    text = data.decode("utf-8", "replace")
    return (text[:width] + "...") if len(text) > width else text


class Command(BaseCommand):
    help = "List the records the fanout job could not decode (topic, partition, offset, why)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=50, help="show at most this many")
        parser.add_argument("--json", action="store_true", help="print the records as JSON lines")
        parser.add_argument(
            "--clear", action="store_true", help="forget the records listed (not the others)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        store = store_for(settings.STARLING)
        letters = sorted(
            store.dead_letters(), key=lambda d: (d["topic"], d["partition"], d["offset"])
        )
        # With --json, standard output carries only the records (JSON lines).
        (self.stderr if options["json"] else self.stdout).write(f"{len(letters)} dead letter(s)")
        for letter in letters[: options["limit"]]:
            if options["json"]:
                self.stdout.write(json.dumps(letter))
                continue
            seen = datetime.fromtimestamp(letter.get("seen_at", 0), tz=UTC).isoformat(
                timespec="seconds"
            )
            where = f"{letter['topic']}/{letter['partition']}@{letter['offset']}"
            self.stdout.write(
                f"{where}  {seen}  {letter['error']}\n"
                f"    key={_preview(letter.get('key'))} value={_preview(letter.get('value'))}"
            )
        if options["clear"] and letters:
            cleared = store.clear_dead_letters(letters[: options["limit"]])
            (self.stderr if options["json"] else self.stdout).write(
                f"cleared {cleared} dead letter(s), {store.dead_letter_count()} left"
            )
