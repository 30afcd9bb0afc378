"""The rebuild's last steps, which need no Spark: a sample of the verified
generation compared with the database's join, and the hand-over to the
fanout job. The command runs them itself also when the job ran the Spark
stages (spark.rebuild.service): the database is the command's, and Spark
code does not import Django.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fanout.config import StarlingConfig
from fanout.store.generations import GenerationState
from fanout.store.timelines import TimelineStore
from spark.rebuild.report import Progress, Summary

#: Oracle(user_ids, cap) -> {user: visible timeline ids, newest first} from the
#: database, and Settled(user_ids, seq) -> the users no write after ``seq`` touched.
Oracle = Callable[[Sequence[int], int], dict[int, list[int]]]
Settled = Callable[[Sequence[int], int], set[int]]


class RebuildFailed(RuntimeError):
    """The rebuild stopped; the live generation is untouched."""


#: How an error raised in Spark's JVM starts (py4j's Py4JJavaError): the
#: Java exception, the part that says what went wrong, is on the next line.
_JVM_CALL = "An error occurred while calling "


#: How an error raised in a Spark task's Python starts (PySpark's
#: PythonException): the Python traceback follows, its exception line last.
_PYTHON_TASK = "An exception was thrown from the Python worker"


def reason_of(exc: BaseException) -> str:
    """What a failed rebuild reports: the first line of ``exc`` (with the Java
    exception's, for an error from Spark's JVM, and the Python exception's,
    for one from a task's Python), or its type's name."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].startswith(_JVM_CALL) and len(lines) > 1:
        return f"{lines[0]} {lines[1].lstrip(': ')}"
    if lines[0].startswith(_PYTHON_TASK):
        raw = text.splitlines()
        starts = [i for i, line in enumerate(raw) if line.startswith("Traceback (most recent")]
        for line in raw[starts[-1] + 1 :] if starts else ():
            if line and not line[0].isspace():  # the first after the frames
                return f"{_PYTHON_TASK}: {line.strip()}"
    return lines[0]


def discard_generation(store: TimelineStore, generation: int) -> int:
    """Delete a generation: its timelines and bookkeeping in Redis, and the
    author state a rebuild wrote for it (when it is on this machine's disk).
    Returns the keys deleted."""
    state_path = store.generation_meta(generation).get("state_path")
    if state_path:  # first: the metadata naming it goes last
        shutil.rmtree(Path(state_path).parent, ignore_errors=True)
    return store.drop_generation(generation)


def drop_built(store: TimelineStore, generation: int) -> bool:
    """Delete a generation that will not be handed over (its rebuild failed, or
    its command ended first); False if it is no longer ``building``: handed
    over already, or being deleted by someone else."""
    if not store.move_generation(
        generation, GenerationState.DROPPING, expect=GenerationState.BUILDING
    ):
        return False
    discard_generation(store, generation)
    return True


@dataclass
class Conclusion:
    """A verified generation's way to the readers: the sample check, then the
    hand-over (its figures go into ``summary``)."""

    config: StarlingConfig
    store: TimelineStore
    progress: Progress
    summary: Summary
    oracle: Oracle | None = None
    settled: Settled | None = None
    #: False when the fanout job built the generation: its author state is on
    #: the job's disk, and the job deletes it once the command's request ends.
    deletes_failed: bool = True

    def conclude(self, generation: int, sample: list[int], wait: float) -> None:
        """Check ``sample`` against the database (if one differs the
        generation is deleted: here, or by the fanout job that built it),
        then hand the generation over and wait up to ``wait`` seconds for
        the switch."""
        try:
            self.check_sample(generation, sample)
        except BaseException:
            if self.deletes_failed:
                self.progress.note(f"failed: deleting generation {generation}")
                drop_built(self.store, generation)
            else:
                self.progress.note(f"failed: the fanout job deletes generation {generation}")
            raise
        self.hand_over(generation, wait)

    def check_sample(self, generation: int, sample: list[int]) -> None:
        """The sampled timelines, as readers see them (the pulled authors' lists
        merged in), against the oracle query; users written to after the
        snapshot are skipped, since the job has not applied those writes yet.
        A screened view (a filter, a pulled author followed with reposts off,
        replies kept aside or a pulled author's replies to users the reader
        does not follow: docs/decisions.md D28, D29) that holds fewer than
        ``STARLING_TIMELINE_SIZE`` entries above its floor is compared there:
        reads go on into the database below it (and a timeline its filter left
        short is refilled after the hand-over)."""
        if self.oracle is None or not sample:
            return
        self.progress.stage("comparing a sample with the database")
        since = self.summary.snapshot_contiguous
        settled = self.settled(sample, since) if self.settled else set(sample)
        checked = [u for u in sample if u in settled]
        cap = self.config.timeline_size
        expected = self.oracle(checked, cap)
        found = {u: self.store.timeline(generation, u) for u in checked}
        short = [u for u, t in found.items() if t and len(t.ids) < cap and t.horizon > 0]
        screened: set[int] = set()
        if short:
            screened = self.store.screened(generation, short)
            screened |= self.store.with_replies(generation, sorted(set(short) - screened))
        bad = []
        for user in checked:
            timeline = found[user]
            want = expected.get(user, [])
            if timeline is not None and user in screened:
                want = [t for t in want if t >= timeline.horizon]
            if (timeline.ids if timeline else []) != want:
                bad.append(user)
        self.summary.sample_checked = len(checked)
        self.summary.sample_skipped = len(sample) - len(checked)
        if bad:
            raise RebuildFailed(
                f"{len(bad)} of {len(checked)} sampled timelines differ from the database "
                f"(e.g. users {bad[:5]})"
            )
        self.progress.done(
            f"{len(checked)} timelines equal the database's join "
            f"({self.summary.sample_skipped} skipped: written to after the snapshot)"
        )

    def hand_over(self, generation: int, wait: float) -> None:
        self.progress.stage(f"handing generation {generation} over to the fanout job")
        if not self.store.request_handover(generation):
            raise RebuildFailed(
                f"generation {generation} was deleted before its hand-over "
                "(its request expired, or the fanout job restarted)"
            )
        deadline = time.monotonic() + wait
        shown = 0.0
        while time.monotonic() < deadline:
            if self.store.active_generation() == generation:
                self.summary.switched = True
                self.progress.done(
                    f"generation {generation} is active; the old one is being deleted"
                )
                return
            if time.monotonic() - shown > 5:
                wm = self.store.watermark(generation)
                self.progress.note(
                    f"waiting for the job to catch up: generation {generation} at seq "
                    f"{wm.seq if wm else '?'}"
                )
                shown = time.monotonic()
            time.sleep(0.5)
        self.progress.done(
            f"not switched yet after {wait:.0f}s: generation {generation} is verified and handed "
            "over; the fanout job switches to it when it runs and has caught up"
        )
