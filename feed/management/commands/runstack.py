"""``manage.py runstack``: the whole embedded stack under one supervisor (``make run``).

It migrates the database, collects static files, chooses ports, then hands
over to honcho, which runs the processes of the ``Procfile`` with prefixed
logs and stops them all on Ctrl-C. Given ``REDIS_URL`` or
``KAFKA_BOOTSTRAP_SERVERS`` it uses those servers instead of starting its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
import urllib.request
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

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
        if "KAFKA_PORT" in env:
            # The embedded broker starts empty: put the database's rows back on
            # the changelogs and let the fanout job rebuild every timeline.
            env["FANOUT_ARGS"] = "--reset"
            if User.objects.exists():
                call_command("republish_changelogs")
        processes = [
            p
            for p in PROCESSES
            if not (p == "redis" and "REDIS_PORT" not in env)
            and not (p == "broker" and "KAFKA_PORT" not in env)
        ]
        honcho = shutil.which("honcho", path=os.path.dirname(sys.executable)) or "honcho"
        self.stdout.write(f"starting: {', '.join(processes)} (Ctrl-C stops everything)")
        sys.stdout.flush()
        procfile = str(settings.BASE_DIR / "Procfile")
        os.execvpe(honcho, [honcho, "-f", procfile, "start", *processes], env)  # noqa: S606

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
            port = free_port(preferred=9092)
            env.update(KAFKA_PORT=str(port), KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}")
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
