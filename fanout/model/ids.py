"""53-bit, time-ordered ids (snowflake style).

Layout, most significant bit first::

    | 41 bits: milliseconds since EPOCH | 5 bits: node | 7 bits: sequence |

53 bits is the largest integer a double holds exactly, so an id survives
being a Redis sorted-set score, a JSON number in a browser, and a Lua number
inside a Redis script. Ids sort by creation time (to the millisecond), which
makes them the pagination cursors (``max_id``/``since_id``) and lets a
timeline be ordered by id alone. 41 bits of milliseconds last until 2095.

The node field keeps two processes that mint ids in the same millisecond
apart; 7 bits of sequence allow 128 ids per millisecond per node.
This module is pure: the clock is injected and no I/O happens here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

#: 2026-01-01T00:00:00Z in Unix milliseconds.
EPOCH_MS = 1_767_225_600_000
TIME_BITS = 41
NODE_BITS = 5
SEQUENCE_BITS = 7
MAX_NODE = (1 << NODE_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_ID = (1 << (TIME_BITS + NODE_BITS + SEQUENCE_BITS)) - 1

_NODE_SHIFT = SEQUENCE_BITS
_TIME_SHIFT = SEQUENCE_BITS + NODE_BITS


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def compose(ms: int, node: int, sequence: int) -> int:
    """Build an id from Unix milliseconds, a node number and a sequence."""
    since = ms - EPOCH_MS
    if not 0 <= since < (1 << TIME_BITS):
        raise ValueError(f"timestamp {ms} ms is outside the id epoch")
    if not 0 <= node <= MAX_NODE:
        raise ValueError(f"node must be 0-{MAX_NODE}, got {node}")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence must be 0-{MAX_SEQUENCE}, got {sequence}")
    return (since << _TIME_SHIFT) | (node << _NODE_SHIFT) | sequence


def timestamp_ms(id_: int) -> int:
    """Unix milliseconds at which ``id_`` was minted."""
    return (id_ >> _TIME_SHIFT) + EPOCH_MS


def created_at(id_: int) -> datetime:
    return datetime.fromtimestamp(timestamp_ms(id_) / 1000, tz=UTC)


def is_valid(id_: object) -> bool:
    return isinstance(id_, int) and not isinstance(id_, bool) and 0 < id_ <= MAX_ID


class IdGenerator:
    """Mints strictly increasing ids for one node; thread-safe.

    If the clock steps backwards the generator keeps using the last
    millisecond it saw (borrowing sequence numbers) instead of minting ids
    that could repeat; if 128 ids are taken in one millisecond it waits for
    the next.
    """

    def __init__(self, node: int, clock: Callable[[], int] = _now_ms) -> None:
        if not 0 <= node <= MAX_NODE:
            raise ValueError(f"node must be 0-{MAX_NODE}, got {node}")
        self.node = node
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ms = -1
        self._sequence = 0

    def next_id(self) -> int:
        with self._lock:
            ms = max(self._clock(), self._last_ms)
            if ms == self._last_ms:
                self._sequence += 1
                if self._sequence > MAX_SEQUENCE:
                    ms = self._wait_past(self._last_ms)
                    self._sequence = 0
            else:
                self._sequence = 0
            self._last_ms = ms
            return compose(ms, self.node, self._sequence)

    def _wait_past(self, ms: int) -> int:
        now = self._clock()
        while now <= ms:
            time.sleep(0.0001)
            now = self._clock()
        return now
