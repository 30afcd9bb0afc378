"""The process's tweet-id generator (see :mod:`fanout.ids` for the layout).

Each process needs its own node number so two processes minting ids in the
same millisecond cannot collide. ``STARLING_NODE_ID`` fixes it; otherwise
the process takes the next number from a Redis counter (modulo 32) the first
time it mints an id, and again after a fork. Should two processes still end
up with one number (more than 32 alive, or Redis lost its counter), the
database's primary key catches the duplicate and :func:`feed.services.tweet_create`
retries with a fresh id.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading

import redis
from django.conf import settings

from fanout import ids
from fanout.redis_conn import client

log = logging.getLogger(__name__)
NODE_COUNTER = "starling:ids:node"

_lock = threading.Lock()
_state: tuple[int, ids.IdGenerator] | None = None


def _allocate_node() -> int:
    config = settings.STARLING
    if config.node_id is not None:
        return config.node_id
    try:
        return (int(client(config.redis_url).incr(NODE_COUNTER)) - 1) % (ids.MAX_NODE + 1)
    except redis.RedisError as exc:
        node = secrets.randbelow(ids.MAX_NODE + 1)
        log.warning("could not take an id node from Redis (%s); using random node %d", exc, node)
        return node


def next_tweet_id() -> int:
    global _state
    pid = os.getpid()
    state = _state
    if state is None or state[0] != pid:
        with _lock:
            if _state is None or _state[0] != pid:
                _state = (pid, ids.IdGenerator(_allocate_node()))
            state = _state
    return state[1].next_id()
