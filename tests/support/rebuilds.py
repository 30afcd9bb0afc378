"""Rebuilds of the whole stack as an operator runs them (``manage.py
rebuild_timelines``), and timelines corrupted on purpose for them to repair."""

from __future__ import annotations

import subprocess

from fanout.store.keys import timeline as timeline_key
from fanout.store.ops import pack_timeline, unpack_timeline
from tests.support.stack import BIN, ROOT, Stack


def rebuild(stack: Stack, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN / "python"), "manage.py", "rebuild_timelines", "--wait", "240", *args],
        cwd=ROOT,
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    """The command's standard output, once it has exited with status 0."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out + err
    return out


def all_users(stack: Stack) -> list[str]:
    return sorted(name for (name,) in stack.sql("SELECT username FROM feed_user"))


def user_id(stack: Stack, name: str) -> int:
    return stack.sql("SELECT id FROM feed_user WHERE username = ?", name)[0][0]


def corrupt(stack: Stack, uid: int, bogus: int) -> None:
    """What a buggy fanout would leave: entries lost, a wrong one added."""
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    key = timeline_key(generation, uid, store.shards.tag_of(uid))
    horizon, ids = unpack_timeline(store.redis.get(key) or pack_timeline(0, []))
    damaged = sorted({*ids[::2], bogus})
    store.redis.set(key, pack_timeline(horizon, damaged))
