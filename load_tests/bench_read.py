"""Home-timeline read benchmark: the HTTP endpoint against raw script calls.

    python -m load_tests.bench_read [--users 2000] [--connections 64] [--seconds 15]

Starts its own Redis, fills timelines of STARLING_TIMELINE_SIZE (800) entries with
~200-byte tweet bodies through the timeline store (every user follows 200
pushed authors), serves the real WSGI application with granian, and
measures in the same run, for two kinds of readers:

* *single list*: users whose reads are one timeline;
* *merged*: users who also follow 20 pulled authors (each with a list of
  its newest 864 tweets), whose reads merge 21 lists in the same script call;

1. raw calls of the read script (``redis-benchmark``, C, EVALSHA with the
   arguments the endpoint sends for one such user: a 50-tweet first page);
2. the endpoint at full load (``wrk``, each request with the token of a
   random user of that kind: many timelines, not one): requests/s, p50/p99;
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
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-" + "x" * 40


def wrk(
    url: str,
    tokens: list[str],
    connections: int,
    seconds: int,
    workdir: Path,
    mean_delay_ms: float = 0.0,
) -> dict[str, float]:
    """Run wrk; return rps, p50, p99 (ms). Each request carries the token of a
    random one of ``tokens`` (many users' timelines are read). With
    ``mean_delay_ms`` each connection waits a random (exponential) time between
    requests: arrivals then look like independent users rather than 64
    connections firing in lock-step."""
    script = workdir / f"wrk-{uuid.uuid4().hex[:6]}.lua"
    listed = ",\n".join(f'"Bearer {t}"' for t in tokens)
    script.write_text(
        textwrap.dedent(
            """
            local tokens = {
            %s
            }
            local mean = %.3f
            function init(args)
              math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) %% 100000)
            end
            function request()
              wrk.headers["Authorization"] = tokens[math.random(#tokens)]
              return wrk.format()
            end
            function delay()
              if mean <= 0 then return 0 end
              return -mean * math.log(1 - math.random())
            end
            """
        )
        % (listed, mean_delay_ms)
    )
    args = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout  # noqa: S603
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "requests": float(re.search(r"(\d+) requests in", out).group(1)),  # type: ignore[union-attr]
        "p50": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "p99": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "non2xx": float(m.group(1))
        if (m := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out))
        else 0.0,
    }


def paced(
    url: str, tokens: list[str], connections: int, seconds: int, workdir: Path, rate: float
) -> dict[str, float]:
    """wrk at about ``rate`` requests/s. wrk's delay timer runs late here (about
    2x on this machine), so short calibration runs scale the mean delay until
    the achieved rate is within 5% of the target, then the measured run."""
    delay = 1000.0 * connections / rate
    for _ in range(4):
        probe = wrk(url, tokens, connections, 3, workdir, delay)
        if abs(probe["rps"] - rate) <= 0.05 * rate:
            break
        delay *= probe["rps"] / rate
    return wrk(url, tokens, connections, seconds, workdir, delay)


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


def fill(store: Any, config: Any, n_users: int) -> tuple[list[int], list[int]]:
    """Fill ``store`` (seeded: every store gets the same network): timelines of
    STARLING_TIMELINE_SIZE entries for users following 200 pushed authors each, and 20
    pulled authors with full lists followed by the second half of the users.
    Returns the readers of one list and the readers of merged lists."""
    from fanout.model import events, ids
    from fanout.model.author_state import AuthorState
    from fanout.model.join import Mutation, Op, join_events, newest
    from load_tests import network
    from load_tests.harness import mark_applied

    generation = store.ensure_active_generation()
    rnd = random.Random(7)
    gen = ids.IdGenerator(5)
    cap, keep = config.timeline_size, config.timeline_size + config.timeline_slack
    users = range(1, n_users + 1)
    followers: dict[int, set[int]] = {a: set() for a in users}
    for u in users:
        for a in rnd.sample(users, 200):
            if a != u:
                followers[a].add(u)
    for _ in range(cap // 200 + 4):
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author in users:
            ev = events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))
            result = join_events(
                author,
                AuthorState(followers=followers[author]),
                [events.Envelope(1, ev)],
                cap=cap,
            )
            bodies |= result.bodies
            mutations += result.mutations
        store.apply(generation, bodies, mutations)
    merged_readers = list(users)[n_users // 2 :]
    bodies, mutations = {}, []
    for author in range(n_users + 1, n_users + 21):
        tweets = []
        for _ in range(keep + 10):
            ev = events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))
            bodies[ev.tweet_id] = events.tweet_json(ev)
            tweets.append(ev.tweet_id)
        kept, horizon = newest(tweets, keep)
        mutations.append(Mutation(Op.LIST, (author,), kept, horizon))
        mutations.append(Mutation(Op.PULL, tuple(merged_readers), (), 0, 1, 0, (author,)))
    store.apply(generation, bodies, mutations)
    mark_applied(store, generation)
    single_readers = list(users)[: n_users // 2]
    for user_id in (single_readers[41], merged_readers[41]):
        assert store.read_page(user_id, count=50).status == "ok"
    return single_readers, merged_readers


def serve(
    port: int, env: dict[str, str], args: argparse.Namespace, workdir: Path
) -> subprocess.Popen[bytes]:
    """The real WSGI application (fast path for the timeline) under granian."""
    from feed.devstack import embedded

    server = subprocess.Popen(  # noqa: S603
        [
            str(Path(sys.executable).parent / "granian"),
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
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
    embedded.wait_for_port("127.0.0.1", port, 30, server)
    return server


def stop_server(server: subprocess.Popen[bytes] | None) -> None:
    if server is not None:
        server.terminate()
        server.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--workers", type=int, default=2, help="granian worker processes")
    parser.add_argument("--backpressure", type=int, default=16, help="granian --backpressure")
    parser.add_argument("--chart", type=Path, help="the chart's PNG (default: beside the report)")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="measure the endpoint on a single Redis and on a Redis Cluster "
        "(three primaries, three replicas on this machine), same data, same run",
    )
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

    from feed.devstack import embedded

    workdir = ROOT / "var" / "bench" / f"read-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    rport = embedded.free_port()
    redis_proc = embedded.start(embedded.redis_command(rport), rport, log=workdir / "redis.log")
    nodes: list[Any] = []
    try:
        os.environ.update(
            REDIS_URL=f"redis://127.0.0.1:{rport}/0",
            DATABASE_URL=f"sqlite:///{workdir / 'db.sqlite3'}",
        )
        django.setup()
        env = {**os.environ, "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        if args.cluster:
            from load_tests.read_cluster import against_cluster  # it builds on this module

            nodes = embedded.start_redis_cluster(workdir / "cluster")
            return against_cluster(args, workdir, env, rport, nodes)
        return against_raw_script(args, workdir, env, rport)
    finally:
        if nodes:
            embedded.stop_redis_cluster(nodes)
        embedded.stop(redis_proc)


def tokens_for(users: list[int]) -> dict[int, str]:
    from feed.auth import issue_token
    from feed.models import User

    return {u: issue_token(User(id=u, username=f"user{u}")) for u in users}


def against_raw_script(
    args: argparse.Namespace, workdir: Path, env: dict[str, str], rport: int
) -> int:
    """The endpoint beside raw calls of the script it sends, one Redis."""
    from fanout.config import StarlingConfig
    from fanout.store.timelines import store_for
    from feed.devstack import embedded
    from feed.readpath import timeline_reader  # noqa: F401  (checks the app imports)
    from load_tests import charts
    from load_tests.harness import Report, ratio

    config = StarlingConfig.from_env()
    store = store_for(config)
    single_readers, merged_readers = fill(store, config, args.users)
    single_user, merged_user = single_readers[41], merged_readers[41]
    timeline = store.timeline(store.ensure_active_generation(), single_user)
    entries = len(timeline.ids) if timeline else 0
    body_bytes = len(store.read_page(single_user, count=50).body)
    tokens = tokens_for(single_readers + merged_readers)
    wport = embedded.free_port()
    server = serve(wport, env, args, workdir)
    try:
        url = f"http://127.0.0.1:{wport}/api/v1/timeline?count=50"
        if args.hold:
            command = store.read_page_command(merged_user, count=50)
            print(f"serving {url}\nAuthorization: Bearer {tokens[merged_user]}")
            print(f"redis port {rport}, script {command[1]}, args {command[3:]}")
            with contextlib.suppress(KeyboardInterrupt):
                server.wait()
            return 0

        def measure(readers: list[int], user_id: int) -> dict[str, dict[str, float]]:
            """Raw script calls for one reader, then the endpoint for all of them."""
            command = store.read_page_command(user_id, count=50)
            mine = [tokens[u] for u in readers]
            wrk(url, mine, args.connections, 3, workdir)  # warm-up: workers, script cache
            raw = redis_benchmark(rport, command[1], command[3:], args.connections, 150_000)
            peak = wrk(url, mine, args.connections, args.seconds, workdir)
            half = paced(url, mine, args.connections, args.seconds, workdir, peak["rps"] / 2)
            return {"raw": raw, "peak": peak, "half": half}

        runs = {"single": measure(single_readers, single_user)}
        runs["merged"] = measure(merged_readers, merged_user)
    finally:
        stop_server(server)

    report = Report(
        "bench_read",
        params=vars(args)
        | {
            "timeline_entries": entries,
            "page": "50 tweets",
            "page_bytes": body_bytes,
            "merged": "20 pulled authors' lists beside the timeline",
        },
    )
    for kind, run in runs.items():
        raw, peak, half = run["raw"], run["peak"], run["half"]
        prefix = "" if kind == "single" else "merged_"
        report.add(f"{LABELS[kind]}:", "")
        report.add(
            "  raw script calls/s (redis-benchmark)",
            round(raw["rps"]),
            f"p50 {raw['p50']:.2f} ms, p99 {raw['p99']:.2f} ms",
            key=f"{prefix}raw_rps",
        )
        report.add(
            "  endpoint requests/s at full load (wrk)",
            round(peak["rps"]),
            f"p50 {peak['p50']:.2f} ms, p99 {peak['p99']:.2f} ms",
            key=f"{prefix}http_rps",
        )
        report.add(
            "  ratio endpoint / raw script",
            round(ratio(peak["rps"], raw["rps"]), 2),
            key=f"{prefix}ratio",
        )
        add_half_load(report, half, peak, prefix)
    single, merged = runs["single"], runs["merged"]
    p99_ratio = ratio(merged["half"]["p99"], single["half"]["p99"])
    report.add("p99 at half load, merged / single list", round(p99_ratio, 2), key="p99_ratio")
    errors = count_errors(runs)
    report.add("non-2xx responses", int(errors))
    for kind, run in runs.items():
        report.check(
            f"{LABELS[kind]}: endpoint >= half of the raw script calls/s",
            run["peak"]["rps"] >= run["raw"]["rps"] / 2,
        )
    report.check("single list: p99 < 10 ms at half of the peak", single["half"]["p99"] < 10)
    report.check("merged: p99 at half load <= 2 x the single list's", p99_ratio <= 2)
    report.check("no errors", errors == 0)
    report.print()
    print(f"report: {report.save()}")
    chart = charts.draw(
        args.chart or report.path("png"),
        "Home-timeline reads: the endpoint beside the Redis script it calls (same run)",
        charts.bars(
            {
                LABELS[kind]: {
                    "script alone (redis-benchmark)": run["raw"]["rps"],
                    "HTTP endpoint (wrk)": run["peak"]["rps"],
                }
                for kind, run in runs.items()
            },
            "requests/s",
            "Throughput at full load",
        ),
        half_load_panel(runs),
    )
    print(f"chart: {chart}")
    return 0


LABELS = {"single": "single list", "merged": "merged: timeline + 20 lists"}


def add_half_load(report: Any, half: dict[str, float], peak: dict[str, float], prefix: str) -> None:
    report.add(
        "  endpoint at half of its peak",
        round(half["rps"]),
        f"requests/s achieved (target {peak['rps'] / 2:,.0f})",
        key=f"{prefix}half_rps",
    )
    report.add("    latency p50", round(half["p50"], 2), "ms", key=f"{prefix}half_p50_ms")
    report.add("    latency p99", round(half["p99"], 2), "ms", key=f"{prefix}half_p99_ms")


def count_errors(runs: dict[str, dict[str, dict[str, float]]]) -> float:
    return sum(r[k]["non2xx"] for r in runs.values() for k in ("peak", "half"))


def half_load_panel(runs: dict[str, dict[str, dict[str, float]]]) -> Any:
    from load_tests import charts

    return charts.bars(
        {
            LABELS.get(name, name).replace(": ", "\n"): {
                "p50": run["half"]["p50"],
                "p99": run["half"]["p99"],
            }
            for name, run in runs.items()
        },
        "ms",
        "Endpoint latency at half of its peak",
    )


if __name__ == "__main__":
    sys.exit(main())
