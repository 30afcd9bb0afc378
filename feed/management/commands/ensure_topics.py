from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fanout.kafka import BrokerUnavailable, TopicMismatch, ensure_topics


class Command(BaseCommand):
    help = "Create the changelog topics (compacted, STARLING_PARTITIONS partitions) if missing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for Kafka")

    def handle(self, *args: Any, **options: Any) -> None:
        config = settings.STARLING
        try:
            created = ensure_topics(config, timeout=options["wait"])
        except (BrokerUnavailable, TopicMismatch) as exc:
            raise CommandError(str(exc)) from exc
        names = ", ".join(config.topics.all())
        if created:
            self.stdout.write(f"created topics: {', '.join(created)}")
        else:
            self.stdout.write(f"topics ready: {names}")
