"""Redis clients, one pool per process and URL (safe across fork)."""

from __future__ import annotations

import os
import threading

import redis

_lock = threading.Lock()
_clients: dict[tuple[int, str], redis.Redis] = {}


def client(url: str) -> redis.Redis:
    key = (os.getpid(), url)
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = redis.Redis.from_url(
                url,
                socket_timeout=5,
                socket_connect_timeout=2,
                health_check_interval=30,
                retry_on_timeout=False,
            )
            _clients[key] = found
        return found
