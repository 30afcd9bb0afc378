"""The timeline rebuild through the whole stack: corrupted timelines repaired,
readers see the old or the new timeline and never a mix, writes made during
the rebuild survive it, and a Redis that lost everything comes back."""

from __future__ import annotations

import json
import random
import signal
import threading
import time

import pytest
import requests

from fanout.store import keys
from fanout.store.ops import unpack_timeline
from tests.support.oracle import (
    MENTIONS_SQL,
    Workload,
    check_against_oracle,
    check_lists,
    come_back,
    go_idle,
)
from tests.support.rebuilds import all_users, corrupt, finish, rebuild, user_id
from tests.support.stack import Stack

# The fanout job runs the rebuilds on its session; a standalone one starts its own.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def check_mentions(stack: Stack, generation: int, users: list[int]) -> int:
    """Every user's mentions timeline in Redis (owner -u, docs/decisions.md
    D30) is the newest cap + slack of the database's mentions view, its
    horizon the oldest kept when older ones were cut; returns how many
    entries they hold."""
    view: dict[int, list[int]] = {u: [] for u in users}
    for owner, post in stack.sql(MENTIONS_SQL):
        if owner in view:
            view[owner].append(post)
    keep = stack.timeline_size + int(stack.env["STARLING_TIMELINE_SLACK"])
    entries = 0
    for user, posts in view.items():
        kept = posts[:keep]
        key = keys.timeline(generation, -user, stack.store.shards.tag_of(-user))
        raw = stack.store.redis.get(key)
        assert isinstance(raw, bytes), f"user {user} has no mentions timeline"
        found = unpack_timeline(raw)
        assert found == ((kept[-1] if len(posts) > keep else 0), sorted(kept)), f"user {user}"
        entries += len(kept)
    return entries


class Reader(threading.Thread):
    """Reads one user's timeline over HTTP as fast as it can, keeping every page."""

    def __init__(self, stack: Stack, token: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{stack.base}/api/v1/timeline?count=50"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.pages: list[tuple[int, ...]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        http = requests.Session()
        while not self.stop.is_set():
            response = http.get(self.url, headers=self.headers, timeout=10)
            if response.headers.get("X-Starling-Source") == "redis":
                self.pages.append(tuple(t["id"] for t in response.json()["tweets"]))
            time.sleep(0.02)


def test_rebuild_repairs_corrupted_timelines_while_reads_and_writes_go_on(stack: Stack) -> None:
    # With suspensions: the rebuild reads their tombstones and reposts too.
    work = Workload(stack, random.Random(11), prefix="rb", suspensions=0.03, engagements=0.2)
    work.register(40)
    work.run(500)
    # The reader's user: three tweets of its own, nobody else writes to its timeline.
    solo = Workload(stack, random.Random(0), prefix="rb_reader")  # kept out of `work`
    solo.register(1)
    reader_name = "rb_reader0"
    own = [solo.call("POST", "/tweets", reader_name, {"text": f"mine {i}"})["id"] for i in range(3)]
    stack.settle()  # no refill in flight: the damage below stays until the rebuild

    victims = random.Random(3).sample(sorted(work.users), 10)
    # Dropped now, kept dropped by the rebuild; read as below, so not suspended.
    idle = sorted(set(work.users) - set(victims) - work.suspended - {"rbmod"})[:3]
    work.protected |= set(idle)
    go_idle(stack, idle)
    bogus = next(iter(work.live))  # a real tweet, wrong in most timelines
    for name in [*victims, reader_name]:
        corrupt(stack, user_id(stack, name), bogus)
    damaged_reader = tuple(sorted({*own[::2], bogus}, reverse=True))

    # The dry run (on a Spark of its own) reports the damage and changes nothing.
    generation = stack.store.active_generation()
    report = dry_run(stack, "--standalone")
    assert report["differing"] >= len(victims) + 1
    assert report["missing_entries"] > 0 and report["extra_entries"] > 0
    assert stack.store.active_generation() == generation

    reader = Reader(stack, solo.users[reader_name])
    reader.start()
    proc = rebuild(stack)
    during = 0
    while proc.poll() is None and during < 60:  # writes while the rebuild runs
        work.run(5)
        during += 5
        time.sleep(0.2)
    out = finish(proc)
    assert "(active)" in out and "the job runs it" in out, out  # on the job's session
    stack.wait_for_seq(work.max_seq)
    time.sleep(0.5)
    reader.stop.set()
    reader.join(10)

    new_generation = stack.store.active_generation()
    assert new_generation is not None and new_generation != generation
    active = sorted(set(all_users(stack)) - set(idle))
    stats = check_against_oracle(stack, active)
    assert stats["timelines"] == len(active)
    idle_ids = [user_id(stack, name) for name in idle]
    with_mentions = [*idle_ids, *(-i for i in idle_ids)]  # and their mentions timelines
    assert stack.store.dropped(new_generation, with_mentions) == set(with_mentions)
    come_back(stack, {name: work.users[name] for name in idle})
    fixed = tuple(sorted(own, reverse=True))
    # The bogus entry is a real tweet, which the writes during the rebuild may
    # delete: its body goes, and the damaged timeline then reads without it.
    damaged = {damaged_reader, tuple(sorted(own[::2], reverse=True))}
    assert set(reader.pages) <= {*damaged, fixed}, set(reader.pages) - {*damaged, fixed}
    assert reader.pages[0] in damaged and reader.pages[-1] == fixed
    assert during > 0, "the rebuild finished before any write could be made during it"
    # The old generation is deleted in the background.
    deadline = time.monotonic() + 60
    while stack.store.redis.exists(f"starling:gen:{generation}"):
        assert time.monotonic() < deadline, "old generation not deleted"
        time.sleep(0.5)
    assert not list(stack.store.redis.scan_iter(match=f"tl:{generation}:*", count=1000))
    print(f"\nrebuild: {stats}; {during} writes during the rebuild")


def dry_run(stack: Stack, *args: str) -> dict:
    """The dry run's report: standard output is exactly one JSON document."""
    report = json.loads(finish(rebuild(stack, "--dry-run", "--json", *args)))
    assert report["ok"] is True and report["dry_run"] is True
    return report


def test_after_flushall_one_rebuild_brings_every_timeline_back(stack: Stack) -> None:
    # With blocks, mutes and follows with reposts off: the rebuild writes the
    # owners' filters and screens the timelines with them, as the job does.
    # With likes, reposts and replies: it writes the counts, as the job does.
    work = Workload(
        stack,
        random.Random(12),
        prefix="fl",
        engagements=0.2,
        relations=0.15,
        replies=0.15,
        lists=0.1,
    )
    work.register(30)
    work.run(300)
    assert min(work.counts.get(k, 0) for k in ("block", "mute", "reposts_off")) > 0, work.counts
    # And for certain: cy follows bob, who reposts ann's tweet, and mutes ann
    # (bob's repost is out of cy's view); cy follows dee with reposts off
    # (dee's post is in it, dee's repost of ann's tweet is not).
    few = Workload(stack, random.Random(0), prefix="flx")  # kept out of `work`
    few.register(4)
    ann, bob, cy, dee = (f"flx{i}" for i in range(4))
    tweet = few.call("POST", "/tweets", ann, {"text": "ann's"})["id"]
    few.call("POST", f"/tweets/{tweet}/repost", bob)
    few.call("POST", f"/users/{bob}/follow", cy)
    few.call("POST", f"/users/{ann}/mute", cy)
    own = few.call("POST", "/tweets", dee, {"text": "dee's"})["id"]
    few.call("POST", f"/tweets/{tweet}/repost", dee)
    few.call("POST", f"/users/{dee}/follow", cy)
    few.call("PATCH", f"/users/{dee}/follow", cy, {"reposts": False})
    # Mentions: ann names dee and cy, who mutes her (cy's is empty).
    named = few.call("POST", "/tweets", ann, {"text": f"hi @{dee} and @{cy}"})["id"]
    stack.wait_for_seq(max(work.max_seq, few.max_seq))
    stack.store.redis.flushall()
    time.sleep(3)
    assert stack.procs["fanout"].poll() is None, "the fanout job exited instead of waiting"
    out = finish(rebuild(stack))
    generation = stack.store.active_generation()
    assert generation is not None and "filters" in out, out
    users = [user_id(stack, name) for name in all_users(stack)]
    assert stack.store.screened(generation, users), "no owner's view is screened"
    stats = check_against_oracle(stack, all_users(stack))
    assert stats["timelines"] == len(all_users(stack))
    assert stats["answered"] > 0  # counts with replies, from the rebuild alone
    # Every list's timeline, and nothing of a deleted one, from the rebuild alone.
    lists = check_lists(stack, work.deleted_lists)
    assert lists["lists"] > 0 and lists["lists_entries"] > 0, lists
    found = stack.store.timeline(generation, user_id(stack, cy))
    assert found is not None and found.ids == [own], found
    # Every mentions timeline, from the rebuild alone (no write since its snapshot).
    assert check_mentions(stack, generation, users) > 0
    found = stack.store.timeline(generation, -user_id(stack, dee))
    assert found is not None and found.ids == [named], found
    found = stack.store.timeline(generation, -user_id(stack, cy))
    assert found is not None and found.ids == [], found
    print(f"\nrebuild after flushall: {stats}; {work.counts}")
    # The job carries on in the new generation.
    work.run(20)
    stack.wait_for_seq(work.max_seq)
    check_against_oracle(stack, sorted(work.users))


def test_a_json_rebuild_stopped_midway_still_prints_one_json_document(stack: Stack) -> None:
    proc = rebuild(stack, "--dry-run", "--json")
    assert proc.stderr is not None
    while "reading the changelogs" not in proc.stderr.readline():  # progress: on stderr
        assert proc.poll() is None, "the rebuild ended before it was stopped"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    report = json.loads(out)  # the whole of standard output, nothing else
    assert report["ok"] is False and "interrupted" in report["error"]
    assert report["live_untouched"] is True and proc.returncode != 0
