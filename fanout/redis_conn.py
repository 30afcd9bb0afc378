"""Redis clients, one pool per process and URL (safe across fork)."""

from __future__ import annotations

import os
import threading

import redis

_lock = threading.Lock()
_clients: dict[tuple[int, str, float], redis.Redis] = {}


def client(url: str, *, timeout: float = 5.0) -> redis.Redis:
    """A pooled client; bulk writers (the fanout sink) pass a longer ``timeout``."""
    key = (os.getpid(), url, timeout)
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = redis.Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=2,
                health_check_interval=30,
                retry_on_timeout=False,
            )
            _clients[key] = found
        return found
