"""One relay at a time, triggers never lost, back-off after failures (real Redis)."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from feed.models import User
from feed.relay import RelayCoordinator, RelayResult
from feed.services import tweet_create
from tests.support.factories import UserFactory


def test_only_one_relay_runs_at_a_time_and_a_trigger_during_a_run_is_not_lost(
    redis_client: redis.Redis,
) -> None:
    coordinator = RelayCoordinator(redis_client)
    running = 0
    overlap = False
    runs = 0
    started = threading.Event()
    release = threading.Event()

    def work() -> RelayResult:
        nonlocal running, overlap, runs
        running += 1
        overlap |= running > 1
        runs += 1
        started.set()
        if runs == 1:
            release.wait(5)
        running -= 1
        return RelayResult(published=1)

    holder = threading.Thread(target=coordinator.run, args=(work,))
    holder.start()
    assert started.wait(5)
    # A trigger while the first run holds the lock: it must not run itself...
    assert RelayCoordinator(redis_client).run(work) is None
    release.set()
    holder.join(5)
    # ...but the holder saw the dirty flag and ran once more.
    assert runs == 2 and not overlap
    assert not redis_client.exists(RelayCoordinator.DIRTY, RelayCoordinator.LOCK)


def test_failures_back_off_exponentially(redis_client: redis.Redis) -> None:
    coordinator = RelayCoordinator(redis_client)
    calls = 0

    def failing() -> RelayResult:
        nonlocal calls
        calls += 1
        return RelayResult(error="broker down")

    assert not coordinator.run(failing).ok  # type: ignore[union-attr]
    assert 0 < redis_client.ttl(RelayCoordinator.BACKOFF) <= 1
    assert coordinator.run(failing) is None and calls == 1  # backing off: no attempt
    time.sleep(1.1)
    coordinator.run(failing)
    assert calls == 2 and redis_client.ttl(RelayCoordinator.BACKOFF) == 2
    redis_client.delete(RelayCoordinator.BACKOFF)
    assert coordinator.run(lambda: RelayResult(published=3)).published == 3  # type: ignore[union-attr]
    assert not redis_client.exists(RelayCoordinator.FAILURES)
    assert int(redis_client.hget(RelayCoordinator.STATS, "published") or 0) == 3


@pytest.mark.django_db
def test_commits_queue_one_relay_task_until_it_starts(
    starling, redis_client: redis.Redis, django_capture_on_commit_callbacks
) -> None:
    author: User = UserFactory()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        tweet_create(author=author, text="one")
    assert len(callbacks) == 1
    with django_capture_on_commit_callbacks(execute=True):
        tweet_create(author=author, text="two")
    queued = redis_client.lrange("celery", 0, -1)
    assert len(queued) == 1 and b"feed.tasks.relay_outbox" in queued[0]
    assert redis_client.exists(RelayCoordinator.DIRTY)


@pytest.mark.django_db
def test_a_write_succeeds_when_redis_is_down(
    settings, starling, django_capture_on_commit_callbacks
) -> None:
    from dataclasses import replace

    author: User = UserFactory()
    tweet_create(author=author, text="warm up the id generator")  # takes its node from Redis
    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    with django_capture_on_commit_callbacks(execute=True):
        written = tweet_create(author=author, text="still works")
    assert written.seq > 0
