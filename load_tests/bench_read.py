"""Home-timeline read benchmark: the HTTP endpoint against raw script calls.

    python -m load_tests.bench_read [--users 2000] [--connections 64] [--seconds 15]
                                    [--hidden 1000]

Starts its own Redis, fills timelines of STARLING_TIMELINE_SIZE (800) entries with
~200-byte tweet bodies through the timeline store (every user follows 200
pushed authors), serves the real WSGI application with granian, and
measures in the same run, for two kinds of readers (four with ``--hidden``):

* *single list*: users whose reads are one timeline;
* *merged*: users who also follow 20 pulled authors (each with a list of
  its newest 864 tweets), whose reads merge 21 lists in the same script call;
* with ``--hidden N``, beside each of those kinds (every other reader of
  it), the same kind whose filters key holds N hidden users (blocks and
  mutes, ``keys.filters``): strangers, and the few authors of originals
  the pulled lists repost such that every list loses some. A third of the
  lists' entries are then reposts (of the timelines' authors' posts) for
  every merged reader, hidden users or not: a merged read with them screens
  each list against them;

1. raw calls of the read script (``redis-benchmark``, C, EVALSHA with the
   arguments the endpoint sends for one such user: a 50-tweet first page);
2. the endpoint at full load (``wrk``, each request with the token of a
   random user of that kind: many timelines, not one): requests/s, p50/p99;
3. the endpoint at half of that rate (wrk paced with a Lua ``delay``):
   p50/p99 latency;
4. with ``--hidden``, per kind: p99 at half load with hidden users ÷
   without (load_tests/read_hidden.py, a report of its own after the main one).

Both clients run on this machine next to the server (2 cores), as they would
in the original measurement. Needs ``wrk`` (``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

from load_tests.harness import ratio
from load_tests.read_seed import fill

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-" + "x" * 40


def wrk(
    url: str,
    tokens: list[str],
    connections: int,
    seconds: int,
    workdir: Path,
    mean_delay_ms: float = 0.0,
    paths: list[str] | None = None,
) -> dict[str, float]:
    """Run wrk; return rps, p50, p99 (ms). Each request carries the token of a
    random one of ``tokens`` (many users' timelines are read), and asks for
    that user's path of ``paths`` if given (else ``url``'s). With
    ``mean_delay_ms`` each connection waits a random (exponential) time between
    requests: arrivals then look like independent users rather than 64
    connections firing in lock-step."""
    script = workdir / f"wrk-{uuid.uuid4().hex[:6]}.lua"
    listed = ",\n".join(f'"Bearer {t}"' for t in tokens)
    routes = ",\n".join(f'"{p}"' for p in paths or ())
    script.write_text(
        textwrap.dedent(
            """
            local tokens = {
            %s
            }
            local paths = {
            %s
            }
            local mean = %.3f
            function init(args)
              math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) %% 100000)
            end
            function request()
              local i = math.random(#tokens)
              wrk.headers["Authorization"] = tokens[i]
              if #paths > 0 then return wrk.format(nil, paths[i]) end
              return wrk.format()
            end
            function delay()
              if mean <= 0 then return 0 end
              return -mean * math.log(1 - math.random())
            end
            """
        )
        % (listed, routes, mean_delay_ms)
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
    url: str,
    tokens: list[str],
    connections: int,
    seconds: int,
    workdir: Path,
    rate: float,
    paths: list[str] | None = None,
) -> dict[str, float]:
    """wrk at about ``rate`` requests/s. wrk's delay timer runs late here (about
    2x on this machine), so short calibration runs scale the mean delay until
    the achieved rate is within 5% of the target, then the measured run."""
    delay = 1000.0 * connections / rate
    for _ in range(4):
        probe = wrk(url, tokens, connections, 3, workdir, delay, paths)
        if abs(probe["rps"] - rate) <= 0.05 * rate:
            break
        delay *= probe["rps"] / rate
    return wrk(url, tokens, connections, seconds, workdir, delay, paths)


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
        "--reposts",
        type=float,
        default=0.0,
        help="also measure timelines where this share of the entries are reposts, with "
        "counts (0.33 in performance.md), beside the posts-only ones in the same run; "
        "0 (the default) seeds as the code before reposts can",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="mint the pulled authors' entries in the same rounds as the timelines' "
        "(every source of a merged read overlaps the others; by default the lists "
        "come after the timelines, one after another, and a merged reader sees one)",
    )
    parser.add_argument(
        "--hidden",
        type=int,
        default=argparse.SUPPRESS,  # 0: not in the reports' parameters (they stay as they were)
        metavar="N",
        help="also measure readers (every other one of each kind) with N hidden users "
        "(blocks and mutes; 1000 in the issue), the pulled lists then a third reposts; "
        "0 (the default) seeds and measures as without filters",
    )
    parser.add_argument(
        "--lists",
        action="store_true",
        help="also measure list timelines: every other reader of each kind reads a list "
        "of theirs holding what their home timeline holds (GET /api/v1/lists/{id}/timeline); "
        "report list ÷ home (load_tests/read_lists.py)",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="measure this many times, alternated; report medians"
    )
    parser.add_argument(
        "--hold", action="store_true", help="set up, print the URL and token, serve until Ctrl-C"
    )
    args = parser.parse_args(argv)
    hidden = getattr(args, "hidden", 0)
    if hidden < 0 or (hidden and args.cluster):
        parser.error("--hidden takes N >= 0, and measures on one Redis (not with --cluster)")
    if args.lists and (hidden or args.cluster):
        parser.error("--lists measures on one Redis, without --hidden")
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
    """The endpoint beside raw calls of the script it sends, one Redis: on the
    posts-only timelines and, with ``--reposts``, on timelines of the same
    network where that share of the entries are reposts and tweets have counts
    (another range of users in the same Redis), alternated ``--runs`` times.
    With ``--hidden``, every other reader of each kind has hidden users (and
    the pulled lists have reposts, :data:`LIST_REPOSTS`)."""
    from fanout.config import StarlingConfig
    from fanout.store.timelines import store_for
    from feed.devstack import embedded
    from feed.readpath import timeline_reader  # noqa: F401  (checks the app imports)
    from load_tests.read_report import median_run, report_reads

    config = StarlingConfig.from_env()
    store = store_for(config)
    hidden = getattr(args, "hidden", 0)
    # --hidden: the lists' reposts of timeline authors' posts, per kind of timeline
    reposted: dict[str, list[tuple[int, int]]] = {"posts": [], "reposts": []}
    shared = {"interleave": args.interleave, "list_reposts": LIST_REPOSTS if hidden else 0.0}
    datasets = {"posts": fill(store, config, args.users, reposted=reposted["posts"], **shared)}
    made: set[int] = set()
    if args.reposts > 0:
        datasets["reposts"] = fill(
            store,
            config,
            args.users,
            base=args.users + 100,
            reposts=args.reposts,
            made=made,
            reposted=reposted["reposts"],
            **shared,
        )
    generation = store.ensure_active_generation()
    meta: dict[str, Any] = {}
    for name, (single_readers, _) in datasets.items():
        timeline = store.timeline(generation, single_readers[41])
        shown = list(timeline.ids) if timeline else []
        prefix = "" if name == "posts" else f"{name}_"
        meta[f"{prefix}timeline_entries"] = len(shown)
        meta[f"{prefix}page_bytes"] = len(store.read_page(single_readers[41], count=50).body)
        if made:
            meta[f"{name}_repost_share"] = round(sum(t in made for t in shown) / len(shown), 3)
    kinds = {name: {"single": one, "merged": merged} for name, (one, merged) in datasets.items()}
    hidden_meta: dict[str, Any] = {}
    if hidden:
        from load_tests.read_hidden import with_hidden

        hidden_meta = with_hidden(store, generation, kinds, hidden, reposted)
    listed: dict[int, int] = {}  # --lists: reader -> the list they read
    if args.lists:
        from load_tests.read_lists import with_lists

        listed = with_lists(store, generation, kinds)
    readers = [u for pair in datasets.values() for group in pair for u in group]
    tokens = tokens_for(readers)
    wport = embedded.free_port()
    server = serve(wport, env, args, workdir)
    samples: dict[str, dict[str, list[dict[str, dict[str, float]]]]] = {
        name: {kind: [] for kind in groups} for name, groups in kinds.items()
    }
    try:
        url = f"http://127.0.0.1:{wport}/api/v1/timeline?count=50"
        if args.hold:
            for name, groups in kinds.items():
                for kind in ("merged", "merged_hidden")[: 1 + bool(hidden)]:
                    user = groups[kind][41]
                    command = store.read_page_command(user, count=50)
                    print(f"{name} {kind}: serving {url}\nAuthorization: Bearer {tokens[user]}")
                    print(f"redis port {rport}, script {command[1]}, args {command[3:]}")
            with contextlib.suppress(KeyboardInterrupt):
                server.wait()
            return 0

        def measure(readers: list[int], user_id: int, kind: str) -> dict[str, dict[str, float]]:
            """Raw script calls for one reader, then the endpoint for all of them."""
            owner = -listed[user_id] if kind.endswith("_list") else None
            command = store.read_page_command(user_id, count=50, owner=owner)
            mine = [tokens[u] for u in readers]
            paths = (
                [f"/api/v1/lists/{listed[u]}/timeline?count=50" for u in readers]
                if owner is not None
                else None
            )
            wrk(url, mine, args.connections, 3, workdir, 0.0, paths)  # warm-up: workers, scripts
            calls = 150_000
            if kind.endswith("_hidden"):  # as many as take about as long as the plain ones'
                from load_tests.read_hidden import raw_calls

                calls = raw_calls(store, command, 4 * args.seconds, calls, 10 * args.connections)
            raw = redis_benchmark(rport, command[1], command[3:], args.connections, calls)
            peak = wrk(url, mine, args.connections, args.seconds, workdir, 0.0, paths)
            rate = peak["rps"] / 2
            half = paced(url, mine, args.connections, args.seconds, workdir, rate, paths)
            return {"raw": raw, "peak": peak, "half": half}

        for _ in range(args.runs):
            for name, groups in kinds.items():
                for kind, group in groups.items():
                    samples[name][kind].append(measure(group, group[41], kind))
    finally:
        stop_server(server)
    results = {
        name: {kind: median_run(runs) for kind, runs in per_kind.items()}
        for name, per_kind in samples.items()
    }
    plain = {name: {k: runs[k] for k in ("single", "merged")} for name, runs in results.items()}
    code = report_reads(args, plain, meta)
    if hidden:
        from load_tests.read_hidden import report_hidden

        code = report_hidden(args, results, hidden_meta) or code
    if args.lists:
        from load_tests.read_lists import report_lists

        code = report_lists(args, results) or code
    return code


LABELS = {"single": "single list", "merged": "merged: timeline + 20 lists"}
#: With --hidden, this share of the pulled lists' entries are reposts (performance.md's).
LIST_REPOSTS = 0.33


def add_kind(
    report: Any,
    raw: dict[str, float],
    peak: dict[str, float],
    half: dict[str, float],
    prefix: str,
) -> None:
    """One kind of reader's rows: raw script calls, the endpoint at full load,
    their ratio, and the endpoint at half load."""
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
