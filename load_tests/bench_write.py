"""Write benchmark: ``POST /api/v1/tweets`` over HTTP against the same use-case in-process.

    python -m load_tests.bench_write [--users 200] [--connections 16] [--seconds 15]

Starts its own Redis and a SQLite database (``make run``'s), registers
``--users`` users, serves the real WSGI application with granian, and
measures in the same run:

1. the baseline: the write use-case (``feed.services.tweet_create``: the row,
   the outbox event, the relay's trigger) called in this process, one at a
   time: tweets per second;
2. the endpoint at full load (``wrk``, each request as a random user, rate
   limits off): requests per second, p50 and p99;
3. their ratio, the share of the use-case's rate that survives HTTP,
   authentication, limits and serialization.

No broker is needed: the outbox keeps the events and the relay's trigger is
a Celery message in Redis that no worker takes. Needs ``wrk``. It imports
only what every version of Starling has (the use-case, the token, the
models), so the same file measures an older checkout for a comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-" + "x" * 40
PASSWORD = "bench-password-1"  # noqa: S105 (the benchmark's throwaway users)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args!r} exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


def _ms(value: str) -> float:
    number, unit = re.match(r"([\d.]+)(\w+)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk_posts(
    url: str, tokens: list[str], connections: int, seconds: int, workdir: Path
) -> dict[str, float]:
    """wrk POSTing a short tweet per request, each as a random one of ``tokens``."""
    script = workdir / f"wrk-{uuid.uuid4().hex[:6]}.lua"
    listed = ",\n".join(f'"Bearer {t}"' for t in tokens)
    script.write_text(
        textwrap.dedent(
            """
            local tokens = {
            %s
            }
            local n = 0
            function init(args)
              math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) %% 100000)
            end
            function request()
              n = n + 1
              wrk.method = "POST"
              wrk.headers["Content-Type"] = "application/json"
              wrk.headers["Authorization"] = tokens[math.random(#tokens)]
              wrk.body = '{"text": "benchmark tweet number ' .. n .. '"}'
              return wrk.format()
            end
            """
        )
        % listed
    )
    args = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout  # noqa: S603
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "p50": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "p99": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        "non2xx": float(non2xx.group(1)) if non2xx else 0.0,
    }


def environment(workdir: Path, redis_port: int) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "feed.settings",
        "DJANGO_SECRET_KEY": SECRET,
        "DATABASE_URL": f"sqlite:///{workdir / 'bench.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",  # nothing is relayed here
        "STARLING_VAR_DIR": str(workdir),
        "STARLING_RATE_WRITE_USER": "0",
        "STARLING_RATE_WRITE_IP": "0",
        "STARLING_RATE_LOGIN_IP": "0",
        "PYTHONPATH": str(ROOT),
    }


def in_process(users: list[Any], seconds: float) -> float:
    """Tweets per second of the use-case called here, one at a time."""
    from feed.services import tweet_create

    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        tweet_create(author=users[done % len(users)], text=f"in-process tweet {done}")
        done += 1
    return done / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--workers", type=int, default=2, help="granian worker processes")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk not found: make check-wrk installs it", file=sys.stderr)
        return 2
    workdir = ROOT / "var" / "bench" / f"write-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    redis_port, web_port = free_port(), free_port()
    redis_server = shutil.which("redis-server") or "redis-server"
    redis = subprocess.Popen(  # noqa: S603
        [redis_server, "--port", str(redis_port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    server: subprocess.Popen[bytes] | None = None
    try:
        wait_for_port(redis_port, redis)
        env = environment(workdir, redis_port)
        os.environ.update(env)
        python = str(Path(sys.executable))
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)  # noqa: S603
        import django

        django.setup()
        from feed.auth import issue_token
        from feed.services import user_register

        users = [user_register(username=f"w{i}", password=PASSWORD) for i in range(args.users)]
        tokens = [issue_token(u) for u in users]
        baseline = in_process(users, args.seconds)
        from django.db import connections

        connections.close_all()
        server = subprocess.Popen(  # noqa: S603
            [
                str(Path(sys.executable).parent / "granian"),
                "--interface",
                "wsgi",
                "--host",
                "127.0.0.1",
                "--port",
                str(web_port),
                "--workers",
                str(args.workers),
                "--backpressure",
                "16",
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
        wait_for_port(web_port, server)
        url = f"http://127.0.0.1:{web_port}/api/v1/tweets"
        wrk_posts(url, tokens, args.connections, 3, workdir)  # warm-up: workers, connections
        endpoint = wrk_posts(url, tokens, args.connections, args.seconds, workdir)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        redis.terminate()
        redis.wait(10)
    figures = {
        "inprocess_tweets_per_s": round(baseline),
        "http_rps": round(endpoint["rps"]),
        "http_p50_ms": endpoint["p50"],
        "http_p99_ms": endpoint["p99"],
        "non2xx": endpoint["non2xx"],
        "ratio": round(endpoint["rps"] / baseline, 3),
    }
    print(f"bench_write (SQLite, {args.users} users, {args.connections} connections):")
    for name, value in figures.items():
        print(f"  {name:26} {value}")
    checks = {"no errors": endpoint["non2xx"] == 0}
    for name, ok in checks.items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}")
    reports = ROOT / "load_tests" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    report = reports / f"bench_write-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.write_text(json.dumps({"name": "bench_write", "params": vars(args), "figures": figures}))
    print(f"report: {report}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
