"""A streaming query's checkpoint directory as Spark lays it out (the offset
and commit logs), and the two files Starling adds to it: a heartbeat and the
layout of the join's state. Plain file operations, no Spark."""

from __future__ import annotations

import json
from pathlib import Path

from spark.source.offsets import Offsets
from spark.stream.operator import STATE_LAYOUT


def checkpoint_for(root: Path, generation: int, created_at: str | float = 0) -> Path:
    """Each generation has a checkpoint of its own: a rebuild starts a fresh one.

    The name carries the generation's creation time (milliseconds) besides its
    number, because a number can come back: after Redis lost its generation
    counter (FLUSHALL, restarted empty) the next rebuild is generation 1 again.
    A Spark JVM keeps a stopped query's state stores loaded until a maintenance
    pass notices (up to ``spark.sql.streaming.stateStore.maintenanceInterval``),
    and that maintenance deletes the files it takes for old versions in their
    directory: a new query sharing it loses its state files and fails at every
    restart. Without a creation time (a generation made before it was
    recorded) the name is the number alone."""
    stamp = int(float(created_at or 0) * 1000)
    return root / (f"gen-{generation}-{stamp}" if stamp else f"gen-{generation}")


def committed_batches(checkpoint: Path) -> list[int]:
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def committed_offsets(checkpoint: Path) -> Offsets | None:
    """The end offsets of the last committed batch (None before the first)."""
    batches = committed_batches(checkpoint)
    return logged_offsets(checkpoint, batches[-1]) if batches else None


def logged_offsets(checkpoint: Path, batch_id: int) -> Offsets | None:
    """A batch's end offsets, from the checkpoint's offset log (None if unreadable)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        return json.loads(lines[2]) if len(lines) > 2 else None
    except (OSError, ValueError):
        return None


def rewind(checkpoint: Path, to_batch: int) -> list[int]:
    """Forget the batches after ``to_batch`` (their offset and commit entries):
    the query runs them again from there, with the state it had then."""
    dropped = [b for b in committed_batches(checkpoint) if b > to_batch]
    for log_dir in ("offsets", "commits"):
        for path in (checkpoint / log_dir).glob("*"):
            number = path.name.lstrip(".").split(".")[0]
            if number.isdigit() and int(number) > to_batch:
                path.unlink()
    return dropped


def mark_alive(checkpoint: Path) -> None:
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "alive").touch()


#: The file naming the layout of a checkpoint's join state (spark.stream.operator).
LAYOUT_FILE = "state-layout"


def mark_layout(checkpoint: Path) -> None:
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / LAYOUT_FILE).write_text(STATE_LAYOUT + "\n")


def layout_of(checkpoint: Path) -> str | None:
    """The state layout ``checkpoint`` was written with; None before the file
    existed (one value per author, grouped by author)."""
    path = checkpoint / LAYOUT_FILE
    return path.read_text().strip() if path.exists() else None


def idle_hours(checkpoint: Path, now: float) -> float:
    """Hours since the job last ran on this checkpoint (a commit, or its heartbeat)."""
    stamps = [p.stat().st_mtime for p in (checkpoint / "alive",) if p.exists()]
    batches = committed_batches(checkpoint)
    if batches:
        stamps.append((checkpoint / "commits" / str(batches[-1])).stat().st_mtime)
    return (now - max(stamps)) / 3600 if stamps else 0.0


def older_than(checkpoint: Path, created_at: float) -> bool:
    """True if the checkpoint committed a batch before ``created_at`` (Unix time)."""
    batches = committed_batches(checkpoint)
    if not batches or not created_at:
        return False
    return (checkpoint / "commits" / str(batches[0])).stat().st_mtime < created_at
