"""Redis clients, one pool per process and URL (safe across fork), and
pipelined commands routed to the node of their key (a single Redis or a
Redis Cluster: :func:`run`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

from fanout.procs import per_process
from fanout.store.scripts import Script, explain

#: A client of either kind: Starling's code works with both.
Client = redis.Redis | RedisCluster
#: One command of a :func:`run`: the key that routes it, and a function that
#: queues it on a pipeline (or sends it on a client) and returns what that returns.
Command = tuple[str, Callable[[Any], Any]]

#: How long :func:`run` retries commands a cluster redirected or could not
#: answer (a failover takes the node timeout, then an election).
RETRY_SECONDS = 30.0
_RETRIED = (
    redis.exceptions.NoScriptError,  # sent again alone, the script loads itself
    redis.exceptions.MovedError,
    redis.exceptions.ReadOnlyError,  # a primary back as a replica: the slot map is stale
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)


def client(url: str, *, timeout: float = 5.0) -> redis.Redis:
    """A pooled client; bulk writers (the fanout sink) pass a longer ``timeout``."""
    return _client(url, timeout)


def command(name: str, key: str, *args: Any) -> Command:
    """A :func:`run` command: ``name key args...``, routed by ``key``."""
    return key, lambda c: c.execute_command(name, key, *args)


def script_command(script: Script, tag: str, args: list[Any]) -> Command:
    """A :func:`run` command calling ``script`` on shard ``tag``."""
    return Script.route(tag), lambda c: script(args=args, client=c, tag=tag)


def connect(config: Any, *, timeout: float = 5.0) -> Client:
    """The client of a configuration's timeline store: its Redis Cluster
    (``redis_cluster_urls``) or its single Redis (``redis_url``)."""
    if config.redis_cluster_urls:
        return _cluster(tuple(config.redis_cluster_urls), timeout)
    return _client(config.redis_url, timeout)


@per_process
def _cluster(urls: tuple[str, ...], timeout: float) -> RedisCluster:
    """A cluster client that finds the nodes from any of ``urls`` (credentials
    from the first)."""
    parts = [urlsplit(u) for u in urls]
    return RedisCluster(
        startup_nodes=[ClusterNode(p.hostname or "127.0.0.1", p.port or 6379) for p in parts],
        username=unquote(parts[0].username) if parts[0].username else None,
        password=unquote(parts[0].password) if parts[0].password else None,
        ssl=parts[0].scheme == "rediss",
        socket_timeout=timeout,
        socket_connect_timeout=2,
    )


def is_cluster(client: Client) -> bool:
    return isinstance(client, RedisCluster)


def run(client: Client, commands: Sequence[Command], *, per_trip: int = 1000) -> list[Any]:
    """Send ``commands``, ``per_trip`` per round trip; their replies, in order.

    On a single Redis that is a pipeline. On a cluster, each node gets a
    pipeline of the commands whose keys it serves (one round trip per node
    touched); a command it redirects (``MOVED``, ``ASK``: a slot being
    migrated) or cannot answer (a failover) is sent again alone through the
    cluster client, which follows redirects and refreshes its slot map, for
    up to :data:`RETRY_SECONDS`. Only idempotent commands go through here.
    A reply that is an error is raised.
    """
    if not isinstance(client, RedisCluster):
        out: list[Any] = []
        for start in range(0, len(commands), per_trip):
            pipe = client.pipeline(transaction=False)
            for _, queue in commands[start : start + per_trip]:
                queue(pipe)
            for i, reply in enumerate(pipe.execute(raise_on_error=False), start):
                if isinstance(reply, redis.exceptions.NoScriptError):
                    reply = commands[i][1](client)  # a restarted Redis: loads the script
                elif isinstance(reply, Exception):
                    raise reply
                out.append(reply)
        return out
    replies: list[Any] = [None] * len(commands)
    by_node: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(commands):
        by_node.setdefault(client.get_node_from_key(key).name, []).append(i)
    again: list[int] = []
    for name, indexes in by_node.items():
        node = client.get_node(node_name=name)
        for start in range(0, len(indexes), per_trip):
            part = indexes[start : start + per_trip]
            try:
                pipe = client.get_redis_connection(node).pipeline(transaction=False)
                for i in part:
                    commands[i][1](pipe)
                results = pipe.execute(raise_on_error=False)
            except _RETRIED:
                again += part
                continue
            for i, result in zip(part, results, strict=True):
                if isinstance(result, _RETRIED):
                    again.append(i)
                elif isinstance(result, Exception):
                    raise result
                else:
                    replies[i] = result
    if again:
        _refresh(client)
    deadline = time.monotonic() + RETRY_SECONDS
    for i in again:
        while True:
            try:
                replies[i] = commands[i][1](client)
                break
            except _RETRIED:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                _refresh(client)
    return replies


def _refresh(client: RedisCluster) -> None:
    """Read the cluster's slot map again (a node that is down may fail it: the
    retries then try again)."""
    with contextlib.suppress(redis.RedisError):
        client.nodes_manager.initialize()


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


def text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else value
