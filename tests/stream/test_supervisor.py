"""What the fanout job decides before it resumes a checkpoint (real Redis, a
checkpoint directory laid out as Spark writes it; no query runs here: the
fault tests run the real job)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fanout.config import StarlingConfig
from fanout.store.generations import GenerationState
from fanout.store.timelines import store_for
from spark.stream.checkpoint import committed_batches, idle_hours, layout_of, mark_layout
from spark.stream.supervisor import (
    REPLAYABLE_BATCHES,
    Supervisor,
    Target,
    generation_checkpoint,
    maybe_switch,
)


def checkpoint_with(root: Path, batches: int) -> Path:
    """A checkpoint whose batches 0..batches-1 are planned and committed."""
    for log_dir in ("offsets", "commits"):
        (root / log_dir).mkdir(parents=True, exist_ok=True)
        for b in range(batches):
            (root / log_dir / str(b)).write_text("v1\n{}\n{}\n")
            (root / log_dir / f".{b}.crc").write_text("")
    mark_layout(root)
    return root


def supervisor(config: StarlingConfig) -> Supervisor:
    return Supervisor(
        store_for(config), config, Path("/nonexistent"), lambda t: None, threading.Event()
    )


def watermark_at(config: StarlingConfig, generation: int, batch: int) -> None:
    store_for(config).record_watermark(
        generation,
        batch_id=batch,
        seq=batch,
        marks={},
        contiguous=batch,
        event_time=0,
        offsets={},
        counters={},
    )


def test_a_redis_that_lost_batches_gets_them_run_again(
    starling: StarlingConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_for(starling)
    generation = store.ensure_active_generation()
    checkpoint = checkpoint_with(tmp_path / "gen", 10)
    watermark_at(starling, generation, 6)  # batches 7, 8, 9 were applied, then lost
    assert supervisor(starling).check_resumable(Target(generation, checkpoint)) is None
    assert committed_batches(checkpoint) == list(range(7))
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()) == [
        str(b) for b in range(7)
    ]
    assert "Redis lost the writes of micro-batches 7-9" in caplog.text


def test_too_many_lost_batches_wait_for_a_rebuild(starling: StarlingConfig, tmp_path: Path) -> None:
    store = store_for(starling)
    generation = store.ensure_active_generation()
    checkpoint = checkpoint_with(tmp_path / "gen", REPLAYABLE_BATCHES + 5)
    watermark_at(starling, generation, 2)
    refusal = supervisor(starling).check_resumable(Target(generation, checkpoint))
    assert refusal is not None and "rebuild" in refusal
    assert len(committed_batches(checkpoint)) == REPLAYABLE_BATCHES + 5  # untouched


def test_a_job_down_longer_than_tombstones_are_kept_refuses_to_resume(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    config = replace(starling, tombstone_retention_hours=1)
    generation = store_for(config).ensure_active_generation()
    checkpoint = checkpoint_with(tmp_path / "gen", 3)
    watermark_at(config, generation, 2)
    two_hours_ago = time.time() - 7200
    for path in checkpoint.rglob("*"):
        os.utime(path, (two_hours_ago, two_hours_ago))
    assert idle_hours(checkpoint, time.time()) == pytest.approx(2.0, abs=0.01)
    refusal = supervisor(config).check_resumable(Target(generation, checkpoint))
    assert refusal is not None and "tombstones (1 h)" in refusal and "rebuild" in refusal
    # Down for less than that: it resumes.
    (checkpoint / "alive").touch()
    assert supervisor(config).check_resumable(Target(generation, checkpoint)) is None


def test_a_checkpoint_of_another_state_layout_waits_for_a_rebuild(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    generation = store_for(starling).ensure_active_generation()
    watermark_at(starling, generation, 2)
    checkpoint = checkpoint_with(tmp_path / "gen", 3)
    (checkpoint / "state-layout").unlink()  # written before the layout was recorded
    refusal = supervisor(starling).check_resumable(Target(generation, checkpoint))
    assert refusal is not None and "one value per author" in refusal and "rebuild" in refusal
    (checkpoint / "state-layout").write_text("authors-in-64-buckets\n")
    refusal = supervisor(starling).check_resumable(Target(generation, checkpoint))
    assert refusal is not None and "authors-in-64-buckets" in refusal
    # A checkpoint that has not committed a batch holds no state: it starts.
    fresh = tmp_path / "fresh"
    assert supervisor(starling).check_resumable(Target(generation, fresh)) is None
    mark_layout(fresh)
    assert layout_of(fresh) == layout_of(checkpoint_with(tmp_path / "now", 1))


def test_a_taken_over_generation_becomes_active_only_once_every_seq_is_caught_up(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    store = store_for(starling)
    live = store.ensure_active_generation()
    new = store.new_generation(state="ready")

    def watermark(generation: int, *, seq: int, contiguous: int) -> None:
        store.record_watermark(
            generation,
            batch_id=seq,
            seq=seq,
            marks={},
            contiguous=contiguous,
            event_time=0,
            offsets={},
            counters={},
        )

    watermark(live, seq=50, contiguous=50)
    # Its highest seq is past the live one, but a partition is still behind.
    watermark(new, seq=60, contiguous=40)
    assert not maybe_switch(store, tmp_path, Target(new, tmp_path / "checkpoint"))
    assert store.active_generation() == live
    watermark(new, seq=61, contiguous=50)
    assert maybe_switch(store, tmp_path, Target(new, tmp_path / "checkpoint"))
    assert store.active_generation() == new and not store.generation_exists(live)


def test_a_generation_number_that_comes_back_gets_a_checkpoint_of_its_own(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    """After Redis lost its generation counter the next rebuild is generation 1
    again; its query must not share the directory of the first generation 1,
    whose stopped query's state stores Spark may still be maintaining."""
    store = store_for(starling)
    first = store.ensure_active_generation()
    before = generation_checkpoint(store, tmp_path, first)
    assert store.ensure_active_generation() == first
    assert generation_checkpoint(store, tmp_path, first) == before  # stable while it lives
    checkpoint_with(before, 3)
    time.sleep(0.01)
    store.redis.flushdb()
    again = store.new_generation(state="building")
    assert again == first
    after = generation_checkpoint(store, tmp_path, again)
    assert after != before and not committed_batches(after)
    assert committed_batches(before) == [0, 1, 2]  # untouched: not this generation's


def test_a_checkpoint_named_by_the_number_alone_is_adopted_or_removed(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    store = store_for(starling)
    generation = store.ensure_active_generation()
    legacy = checkpoint_with(tmp_path / f"gen-{generation}", 2)
    adopted = generation_checkpoint(store, tmp_path, generation)
    assert adopted != legacy and not legacy.exists() and committed_batches(adopted) == [0, 1]
    # One committed before the generation was created belongs to an earlier one.
    stale = checkpoint_with(tmp_path / "gen-7", 2)
    os.utime(stale / "commits" / "0", (0, 0))
    store.create_generation(7)
    fresh = generation_checkpoint(store, tmp_path, 7)
    assert not stale.exists() and not committed_batches(fresh)


def test_a_rebuild_after_redis_lost_everything_removes_the_lost_generations_checkpoints(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    store = store_for(starling)
    lost = generation_checkpoint(store, tmp_path, store.ensure_active_generation())
    checkpoint_with(lost, 2)
    time.sleep(0.01)  # a generation's checkpoint is named by its creation's millisecond
    store.redis.flushdb()
    rebuilt = store.new_generation(state="ready")
    store.record_watermark(
        rebuilt, batch_id=0, seq=5, marks={}, contiguous=5, event_time=0, offsets={}, counters={}
    )
    target = Target(rebuilt, generation_checkpoint(store, tmp_path, rebuilt), starting_offsets={})
    checkpoint_with(target.checkpoint, 1)
    assert maybe_switch(store, tmp_path, target)
    assert store.active_generation() == rebuilt
    assert not lost.exists() and committed_batches(target.checkpoint) == [0]


def test_a_generation_handed_over_and_superseded_before_its_switch_is_deleted(
    starling: StarlingConfig, tmp_path: Path
) -> None:
    store = store_for(starling)
    live = store.ensure_active_generation()
    first = store.new_generation(state=GenerationState.BUILDING)
    assert store.request_handover(first)
    store.write_timelines(first, [(7, b"x")])
    checkpoint = checkpoint_with(generation_checkpoint(store, tmp_path, first), 2)
    job = Supervisor(store, starling, tmp_path, lambda t: None, threading.Event())
    job.drop_superseded(Target(first, checkpoint, {}))  # the one the job takes over: kept
    assert store.generation_meta(first)["state"] == GenerationState.READY

    # A second rebuild is handed over before the job switched to the first
    # (the job caught it up, or was down and restarts now).
    second = store.new_generation(state=GenerationState.BUILDING)
    assert store.request_handover(second)
    # A third one is half-way through its hand-over: ready, not yet named.
    third = store.new_generation(state=GenerationState.BUILDING)
    assert store.move_generation(third, GenerationState.READY, expect=GenerationState.BUILDING)
    job.drop_superseded(Target(second, generation_checkpoint(store, tmp_path, second), {}))
    assert not store.generation_exists(first) and not checkpoint.exists()
    assert store.pending_handover() == second and store.active_generation() == live
    assert store.generation_exists(second) and store.generation_exists(live)
    assert store.generation_meta(third)["state"] == GenerationState.READY
