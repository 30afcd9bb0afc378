"""The process's tweet-id generator (see :mod:`fanout.model.ids` for the layout).

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
import secrets

import redis
from django.conf import settings

from fanout.model import ids
from fanout.procs import per_process
from fanout.store import keys
from fanout.store.redis_conn import connect

log = logging.getLogger(__name__)


def next_tweet_id() -> int:
    return _generator().next_id()


@per_process
def _generator() -> ids.IdGenerator:
    """This process's generator (a forked child takes a node number of its own)."""
    return ids.IdGenerator(_allocate_node())


def _allocate_node() -> int:
    config = settings.STARLING
    if config.node_id is not None:
        return config.node_id
    try:
        return (int(connect(config).incr(keys.ID_NODE_COUNTER)) - 1) % (ids.MAX_NODE + 1)
    except redis.RedisError as exc:
        node = secrets.randbelow(ids.MAX_NODE + 1)
        log.warning("could not take an id node from Redis (%s); using random node %d", exc, node)
        return node
