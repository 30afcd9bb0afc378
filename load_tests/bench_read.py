"""Home-timeline read benchmark: the HTTP endpoint against raw script calls.

    python -m load_tests.bench_read [--users 2000] [--connections 64] [--seconds 15]

Starts its own Redis, fills timelines of TIMELINE_SIZE (800) entries with
~200-byte tweet bodies through the timeline store, serves the real WSGI
application with granian, and measures in the same run:

1. raw calls of the read script (``redis-benchmark``, C, EVALSHA with the
   arguments the endpoint sends: a 50-tweet page of an 800-entry timeline);
2. the endpoint at full load (``wrk``): requests/s, p50/p99;
3. the endpoint at half of that rate (wrk paced with a Lua ``delay``):
   p50/p99 latency.

Both clients run on this machine next to the server (2 cores), as they would
in the original measurement. Needs ``wrk`` (``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-" + "x" * 40


def wrk(
    url: str, token: str, connections: int, seconds: int, workdir: Path, mean_delay_ms: float = 0.0
) -> dict[str, float]:
    """Run wrk; return rps, p50, p99 (ms). With ``mean_delay_ms`` each connection
    waits a random (exponential) time between requests: arrivals then look like
    independent users rather than 64 connections firing in lock-step."""
    script = workdir / f"wrk-{uuid.uuid4().hex[:6]}.lua"
    script.write_text(
        textwrap.dedent(
            f"""
            wrk.headers["Authorization"] = "Bearer {token}"
            local mean = {mean_delay_ms:.3f}
            function init(args)
              math.randomseed(os.time() + tonumber(tostring({{}}):sub(8), 16) % 100000)
            end
            function delay()
              if mean <= 0 then return 0 end
              return -mean * math.log(1 - math.random())
            end
            """
        )
    )
    args = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout  # noqa: S603
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "p99": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "non2xx": float(m.group(1))
        if (m := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out))
        else 0.0,
    }


def paced(
    url: str, token: str, connections: int, seconds: int, workdir: Path, rate: float
) -> dict[str, float]:
    """wrk at about ``rate`` requests/s. wrk's delay timer runs late here (about
    2x on this machine), so short calibration runs scale the mean delay until
    the achieved rate is within 5% of the target, then the measured run."""
    delay = 1000.0 * connections / rate
    for _ in range(4):
        probe = wrk(url, token, connections, 3, workdir, delay)
        if abs(probe["rps"] - rate) <= 0.05 * rate:
            break
        delay *= probe["rps"] / rate
    return wrk(url, token, connections, seconds, workdir, delay)


def _ms(value: str) -> float:
    number, unit = re.match(r"([\d.]+)(\w+)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def redis_benchmark(
    port: int, sha: str, args: list[str], clients: int, requests: int
) -> dict[str, float]:
    cmd = [
        "redis-benchmark",
        "-p",
        str(port),
        "-c",
        str(clients),
        "-n",
        str(requests),
        "--csv",
        "EVALSHA",
        sha,
        "0",
        *args,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout  # noqa: S603
    fields = [f.strip('"') for f in out.strip().splitlines()[-1].split(",")]
    header = [f.strip('"') for f in out.strip().splitlines()[0].split(",")]
    row = dict(zip(header, fields, strict=False))
    return {
        "rps": float(row["rps"]),
        "p50": float(row["p50_latency_ms"]),
        "p99": float(row["p99_latency_ms"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--workers", type=int, default=2, help="granian worker processes")
    parser.add_argument("--backpressure", type=int, default=16, help="granian --backpressure")
    parser.add_argument(
        "--hold", action="store_true", help="set up, print the URL and token, serve until Ctrl-C"
    )
    args = parser.parse_args(argv)
    for tool in ("wrk", "redis-benchmark"):
        if not shutil.which(tool):
            raise SystemExit(
                f"{tool} is needed: apt-get install {'wrk' if tool == 'wrk' else 'redis-tools'}"
            )

    os.environ.update(DJANGO_SETTINGS_MODULE="feed.settings", DJANGO_SECRET_KEY=SECRET)
    import django

    from fanout import embedded, events, ids
    from fanout.config import StarlingConfig
    from fanout.join import AuthorState, Mutation, join_events
    from load_tests import network
    from load_tests.harness import Report, ratio

    workdir = ROOT / "var" / "bench" / f"read-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    rport, wport = embedded.free_port(), embedded.free_port()
    redis_proc = embedded.start(embedded.redis_command(rport), rport, log=workdir / "redis.log")
    server: subprocess.Popen[bytes] | None = None
    try:
        redis_url = f"redis://127.0.0.1:{rport}/0"
        os.environ.update(REDIS_URL=redis_url, DATABASE_URL=f"sqlite:///{workdir / 'db.sqlite3'}")
        django.setup()
        from feed.auth import issue_token
        from feed.models import User
        from feed.readpath import timeline_reader  # noqa: F401  (checks the app imports)

        config = StarlingConfig.from_env()
        from fanout.timelines import store_for

        store = store_for(config)
        generation = store.ensure_active_generation()
        rnd = random.Random(7)
        gen = ids.IdGenerator(5)
        # Every user follows 100 others; each author has tweeted enough to fill timelines.
        followers: dict[int, set[int]] = {a: set() for a in range(1, args.users + 1)}
        for u in range(1, args.users + 1):
            for a in rnd.sample(range(1, args.users + 1), 100):
                if a != u:
                    followers[a].add(u)
        tweets_per_author = config.timeline_size // 100 + 4
        for _ in range(tweets_per_author):
            bodies: dict[int, bytes] = {}
            mutations: list[Mutation] = []
            for author in range(1, args.users + 1):
                ev = events.TweetPosted(
                    gen.next_id(), author, f"user{author}", network.tweet_text(rnd)
                )
                result = join_events(
                    author,
                    AuthorState(followers=followers[author]),
                    [events.Envelope(1, ev)],
                    cap=config.timeline_size,
                )
                bodies |= result.bodies
                mutations += result.mutations
            store.apply(generation, bodies, mutations)
        store.record_watermark(
            generation,
            batch_id=1,
            seq=1,
            marks={},
            contiguous=1,
            event_time=time.time(),
            offsets={},
            counters={},
        )
        user_id = 42
        page = store.read_page(user_id, count=50)
        assert page.status == "ok"
        timeline = store.timeline(generation, user_id)
        entries = len(timeline.ids) if timeline else 0
        body_bytes = len(page.body)

        # The web server: the real WSGI app (fast path for the timeline).
        env = {**os.environ, "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        user = User(id=user_id, username="bench")
        token = issue_token(user)
        server = subprocess.Popen(  # noqa: S603
            [
                str(Path(sys.executable).parent / "granian"),
                "--interface",
                "wsgi",
                "--host",
                "127.0.0.1",
                "--port",
                str(wport),
                "--workers",
                str(args.workers),
                "--backpressure",
                str(args.backpressure),
                "--no-ws",
                "--log-level",
                "warning",
                "feed.wsgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=open(workdir / "web.log", "ab"),  # noqa: SIM115 (lives with the server)
            stderr=subprocess.STDOUT,
        )
        embedded.wait_for_port("127.0.0.1", wport, 30, server)
        url = f"http://127.0.0.1:{wport}/api/v1/timeline?count=50"
        command = store.read_page_command(user_id, count=50)
        sha, script_args = command[1], command[3:]

        if args.hold:
            print(f"serving {url}\nAuthorization: Bearer {token}")
            print(f"redis port {rport}, script {sha}, args {script_args}")
            with contextlib.suppress(KeyboardInterrupt):
                server.wait()
            return 0
        wrk(url, token, args.connections, 3, workdir)  # warm-up: workers, script cache
        raw = redis_benchmark(rport, sha, script_args, args.connections, 150_000)
        peak = wrk(url, token, args.connections, args.seconds, workdir)
        half = paced(url, token, args.connections, args.seconds, workdir, rate=peak["rps"] / 2)

        report = Report(
            "bench_read",
            params=vars(args)
            | {"timeline_entries": entries, "page": "50 tweets", "page_bytes": body_bytes},
        )
        report.add(
            "raw script calls/s (redis-benchmark)",
            round(raw["rps"]),
            f"p50 {raw['p50']:.2f} ms, p99 {raw['p99']:.2f} ms",
            key="raw_rps",
        )
        report.add(
            "endpoint requests/s at full load (wrk)",
            round(peak["rps"]),
            f"p50 {peak['p50']:.2f} ms, p99 {peak['p99']:.2f} ms",
            key="http_rps",
        )
        report.add(
            "ratio endpoint / raw script", round(ratio(peak["rps"], raw["rps"]), 2), key="ratio"
        )
        report.add(
            "endpoint at half of its peak",
            round(half["rps"]),
            f"requests/s achieved (target {peak['rps'] / 2:,.0f})",
            key="half_rps",
        )
        report.add("  latency p50", round(half["p50"], 2), "ms", key="half_p50_ms")
        report.add("  latency p99", round(half["p99"], 2), "ms", key="half_p99_ms")
        report.add("non-2xx responses", int(peak["non2xx"] + half["non2xx"]))
        report.check("endpoint >= half of the raw script calls/s", peak["rps"] >= raw["rps"] / 2)
        report.check("p99 < 10 ms at half of the peak", half["p99"] < 10)
        report.check("no errors", peak["non2xx"] + half["non2xx"] == 0)
        report.print()
        print(f"report: {report.save()}")
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        embedded.stop(redis_proc)


if __name__ == "__main__":
    sys.exit(main())
