"""``manage.py runstack``: the whole embedded stack under one supervisor (``make run``).

It migrates the database, collects static files, chooses ports, then hands
over to honcho, which runs the processes of the ``Procfile`` with prefixed
logs and stops them all on Ctrl-C. Given ``REDIS_URL`` or
``KAFKA_BOOTSTRAP_SERVERS`` it uses those servers instead of starting its own.

The embedded broker (Apache Kafka, :mod:`feed.devstack.kafka`) keeps its log
under the state directory, so the changelogs outlive a restart; the embedded
Redis keeps nothing, so the fanout job replays the changelogs into new
timelines at each start (``--reset``) when Redis is the embedded one.
``STARLING_EMBEDDED_KAFKA_NODES=3`` runs three replicated broker nodes
instead of one.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from feed.devstack import kafka
from feed.devstack.embedded import free_port, port_open
from feed.models import User

PROCESSES = ["broker", "redis", "web", "worker", "beat", "fanout", "ready"]


class Command(BaseCommand):
    help = "Run Starling's embedded stack (broker, Redis, web, Celery, the fanout job)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--announce", action="store_true", help="(internal) wait for the API, print where it is"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["announce"]:
            self.announce()
            return
        env = self.environment()
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        # Web and worker processes record their metrics here (feed.metrics); what a
        # previous run left would be summed into this one's.
        shutil.rmtree(env["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
        self.stdout.write("migrating the database...")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        new_log = "KAFKA_PORTS" in env and self.match_broker_to_database(Path(env["KAFKA_DIR"]))
        if "REDIS_PORT" in env or new_log:
            # The embedded Redis starts empty, a new broker log starts at offset
            # 0: either way the job's checkpoint does not fit any more, and it
            # replays the changelogs into a new generation.
            env["FANOUT_ARGS"] = "--reset"
        processes = [
            p
            for p in PROCESSES
            if not (p == "redis" and "REDIS_PORT" not in env)
            and not (p == "broker" and "KAFKA_PORTS" not in env)
        ]
        honcho = shutil.which("honcho", path=os.path.dirname(sys.executable)) or "honcho"
        self.stdout.write(f"starting: {', '.join(processes)} (Ctrl-C stops everything)")
        sys.stdout.flush()
        procfile = str(settings.BASE_DIR / "Procfile")
        os.execvpe(honcho, [honcho, "-f", procfile, "start", *processes], env)  # noqa: S606

    def match_broker_to_database(self, directory: Path) -> bool:
        """Make the embedded broker's changelogs describe the database's rows;
        whether the broker starts on a new, empty log.

        A new broker log dir (first run, or deleted) gets the database's rows
        republished. A log dir kept from an earlier database (this one has no
        users: it was created anew) is deleted: its records name rows and
        outbox seqs that are not there."""
        users = User.objects.exists()
        if kafka.has_data(directory):
            if users:
                return False
            self.stdout.write(f"new database: removing the old broker log dir {directory}")
            shutil.rmtree(directory)
        elif users:
            call_command("republish_changelogs")
        return True

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        web_port = int(env.get("PORT", "8000"))
        host = env.get("HOST", "127.0.0.1")
        if port_open("127.0.0.1", web_port):
            raise CommandError(f"port {web_port} is in use; run with PORT=<another port>")
        env.update(
            WEB_PORT=str(web_port),
            WEB_HOST=host,
            WEB_WORKERS=env.get("WEB_WORKERS", "2"),
            STARLING_VAR_DIR=str(settings.VAR_DIR),
            PROMETHEUS_MULTIPROC_DIR=str(settings.VAR_DIR / "metrics"),
            PYTHONUNBUFFERED="1",
            PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
        )
        # On one machine every client is 127.0.0.1 (curl, Locust): per-address
        # limits would throttle them all as one. Per-user limits stay on.
        env.setdefault("STARLING_RATE_WRITE_IP", "0")
        env.setdefault("STARLING_RATE_LOGIN_IP", "0")
        if not env.get("REDIS_URL"):
            port = free_port()
            env.update(REDIS_PORT=str(port), REDIS_URL=f"redis://127.0.0.1:{port}/0")
        if not env.get("KAFKA_BOOTSTRAP_SERVERS"):
            nodes = embedded_kafka_nodes(env)
            ports = [free_port(preferred=9092)]
            while len(ports) < nodes:
                port = free_port()
                if port not in ports:
                    ports.append(port)
            env.update(
                KAFKA_PORTS=",".join(map(str, ports)),
                KAFKA_NODES=str(nodes),
                KAFKA_DIR=str(settings.VAR_DIR / ("kafka" if nodes == 1 else "kafka-cluster")),
                KAFKA_BOOTSTRAP_SERVERS=",".join(f"127.0.0.1:{p}" for p in ports),
            )
        return env

    def announce(self) -> None:
        base = (
            f"http://{os.environ.get('WEB_HOST', '127.0.0.1')}:{os.environ.get('WEB_PORT', '8000')}"
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base}/api/v1/health", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            self.stderr.write(f"the API at {base} did not become healthy within 120 s")
        config = settings.STARLING
        topics = ", ".join(config.topics.all())
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "Starling is up.",
                    f"  API      {base}/api/v1/   (point your client here)",
                    f"  Docs     {base}/api/docs/",
                    f"  Admin    {base}/admin/   (login: manage.py createmoderator NAME)",
                    f"  Health   {base}/api/v1/health",
                    f"  Kafka    {config.kafka_bootstrap_servers}   topics {topics}",
                    f"  Redis    {config.redis_url}",
                    "Press Ctrl-C to stop everything.",
                    "",
                ]
            )
        )
        sys.stdout.flush()
        signal.pause()


def embedded_kafka_nodes(env: dict[str, str]) -> int:
    """How many nodes the embedded Kafka has (``STARLING_EMBEDDED_KAFKA_NODES``)."""
    value = env.get("STARLING_EMBEDDED_KAFKA_NODES", "1").strip() or "1"
    if value not in {"1", str(kafka.CLUSTER_SIZE)}:
        raise CommandError(
            f"STARLING_EMBEDDED_KAFKA_NODES must be 1 or {kafka.CLUSTER_SIZE}, not {value!r}"
        )
    return int(value)
