"""Redis clients, one pool per process and URL (safe across fork)."""

from __future__ import annotations

import os
import threading
from typing import Any

import redis

from fanout.procs import per_process
from fanout.scripts import Script, explain


def client(url: str, *, timeout: float = 5.0) -> redis.Redis:
    """A pooled client; bulk writers (the fanout sink) pass a longer ``timeout``."""
    return _client(url, timeout)


@per_process
def _client(url: str, timeout: float) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=2,
        health_check_interval=30,
        retry_on_timeout=False,
    )


class HotScript:
    """A Lua script called on a hot path through a connection of its own per thread.

    ``redis.Redis`` pays for generality on every command: a pool checkout
    and a readability poll (a syscall), retry bookkeeping, metrics hooks.
    Measured on this machine for the 50-tweet timeline page: 130 us of CPU
    per call through ``Redis.evalsha``, 64 us through a held connection
    (docs/performance.md). This keeps redis-py's connection (AUTH, SELECT,
    TLS, unix sockets, reconnects) and drops the rest: one send, one read.
    A connection that fails is dropped and the call retried once on a new one.
    """

    def __init__(self, client: redis.Redis, name: str) -> None:
        self.client = client
        self.name = name
        self.script = Script(client, name)
        self._local = threading.local()

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._local.conn = self.client.connection_pool.make_connection()
            self._local.pid = os.getpid()
        return conn

    def __call__(self, *args: str | int | float) -> object:
        last = 2
        for attempt in range(last + 1):
            conn = self._connection()
            try:
                arguments = self.script.arguments(args)
                packed = conn.pack_command("EVALSHA", self.script.sha, 0, *arguments)
                conn.send_packed_command(packed, check_health=False)
                return conn.read_response()
            except redis.exceptions.NoScriptError:
                if attempt == last:
                    raise
                self.client.script_load(self.script.source.text)  # a restarted or flushed Redis
            except redis.ResponseError as exc:
                raise explain(exc, self.name) from None
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                conn.disconnect()
                self._local.conn = None
                if attempt == last:
                    raise
        raise AssertionError("unreachable")
