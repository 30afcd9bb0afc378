"""The rebuild's last steps, which need no Spark: a sample of the verified
generation compared with the database's join, and the hand-over to the
fanout job. The command runs them itself also when the job ran the Spark
stages (spark.rebuild_service): the database is the command's, and Spark
code does not import Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fanout.config import StarlingConfig
from fanout.timelines import TimelineStore
from spark.rebuild_report import Progress, Summary

#: Oracle(user_ids, cap) -> {user: visible timeline ids, newest first} from the
#: database, and Settled(user_ids, seq) -> the users no write after ``seq`` touched.
Oracle = Callable[[Sequence[int], int], dict[int, list[int]]]
Settled = Callable[[Sequence[int], int], set[int]]


class RebuildFailed(RuntimeError):
    """The rebuild stopped; the live generation is untouched."""


def reason_of(exc: BaseException) -> str:
    """What a failed rebuild reports: the first line of ``exc``, or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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

    def conclude(self, generation: int, sample: list[int], wait: float) -> None:
        """Check ``sample`` against the database (the generation is deleted if
        one differs), then hand the generation over and wait up to ``wait``
        seconds for the switch."""
        try:
            self.check_sample(generation, sample)
        except BaseException:
            self.progress.note(f"failed: deleting generation {generation}")
            self.store.drop_generation(generation)
            raise
        self.hand_over(generation, wait)

    def check_sample(self, generation: int, sample: list[int]) -> None:
        """The sampled timelines, as readers see them (the pulled authors' lists
        merged in), against the oracle query; users written to after the
        snapshot are skipped, since the job has not applied those writes yet."""
        if self.oracle is None or not sample:
            return
        self.progress.stage("comparing a sample with the database")
        since = self.summary.snapshot_contiguous
        settled = self.settled(sample, since) if self.settled else set(sample)
        checked = [u for u in sample if u in settled]
        expected = self.oracle(checked, self.config.timeline_size)
        bad = []
        for user in checked:
            found = self.store.timeline(generation, user)
            if (found.ids if found else []) != expected.get(user, []):
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
        self.store.request_handover(generation)
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
