"""What replies cost the store: a reply's delivery against a post's, and a
follow or an unfollow of the user replies answer (docs/decisions.md D29).

    python -m load_tests.bench_replies [--owners 2000] [--cap 800] [--runs 3]

Starts its own Redis and applies the store's own script (pipelined calls, as
the fanout job's sink makes them) to ``--owners`` timelines of ``--cap``
entries each. All in one run, each figure the median of ``--runs``:

1. delivery, µs per timeline: a post appended to every timeline (the
   baseline), a reply to a user the owners follow (it shows, and is recorded
   as shown), and a reply to a user they do not follow (it goes aside);
   target: a reply within 1.1x of a post; then the same once each timeline
   holds ``--aside`` replies aside (300: a feed whose followees answer
   strangers), which a reply's delivery must not read through;
2. a follow of user u by each owner, whose timeline holds m replies to u
   aside (m = 0, 1, 10, 100), and the unfollow that puts them back: µs per
   operation. The operation reads and writes the owner's keys only (its
   followees, its replies aside and shown, its timeline): its cost grows with
   the replies it moves, and nothing in it depends on u's audience or on the
   replies to u that other users' timelines hold.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import redis

from fanout.model.join import Mutation, Op
from fanout.store import keys
from fanout.store.timelines import TimelineStore
from feed.devstack import embedded
from load_tests.fanout_rig import ROOT
from load_tests.harness import Report, ratio

#: Users the owners' timelines hear from: ``AUTHOR`` posts, ``U`` is answered.
AUTHOR, U, FOLLOWED = 1_000_000, 2_000_000, 3_000_000
#: Users the owners do not follow, whom their followees answer (50 of them).
STRANGERS = 4_000_000


class Ids:
    """Entry ids, ascending (what the web mints)."""

    def __init__(self) -> None:
        self.last = 10_000_000

    def __next__(self) -> int:
        self.last += 1
        return self.last

    def __iter__(self) -> Iterator[int]:
        return self


def timed(fn: Callable[[], object], runs: int) -> float:
    """The median seconds of ``runs`` calls of ``fn``."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--owners", type=int, default=2000)
    parser.add_argument("--cap", type=int, default=800)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--aside", type=int, default=300, help="replies aside in phase 1b")
    args = parser.parse_args(argv)
    port = embedded.free_port()
    workdir = ROOT / "var" / "bench" / f"replies-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    proc = embedded.start(embedded.redis_command(port), port, log=workdir / "redis.log")
    report = Report("bench_replies", params=vars(args))
    try:
        store = TimelineStore(redis.Redis(port=port), cap=args.cap)
        generation = store.ensure_active_generation()
        owners = tuple(range(1, args.owners + 1))
        ids = Ids()
        seq = iter(range(1, 10**9))

        def apply(mutations: list[Mutation]) -> None:
            store.apply(generation, {}, mutations)

        # Full timelines, every owner following AUTHOR and FOLLOWED (not U).
        follows = (AUTHOR, FOLLOWED)
        apply([Mutation(Op.FOLLOWED, owners, seq=next(seq), authors=(g,)) for g in follows])
        for _ in range(2):
            full = tuple(next(ids) for _ in range(args.cap))
            apply([Mutation(Op.ADD, owners, full, actor=AUTHOR)])

        def deliver(answers: int) -> Callable[[], None]:
            def run() -> None:
                t = next(ids)
                reply = ((t, answers),) if answers else ()
                post = Mutation(Op.ADD, owners, (t,), seq=next(seq), actor=AUTHOR, answers=reply)
                apply([post])

            return run

        deliveries = {
            "post": deliver(0),
            "reply to a followee (shown)": deliver(FOLLOWED),
            "reply to a stranger (aside)": deliver(U),
        }
        us = {name: timed(fn, args.runs) / len(owners) * 1e6 for name, fn in deliveries.items()}
        report.add("1. delivery to a timeline of the cap, µs", "")
        for name, value in us.items():
            report.add(f"  {name}", round(value, 2), f"{ratio(value, us['post']):.2f} x a post")
        worst = max(ratio(us[name], us["post"]) for name in us)
        # The same with the timelines holding replies aside: those of a feed
        # whose followees answer strangers (a timeline keeps up to its length).
        for k in range(args.aside):
            deliver(STRANGERS + k % 50)()
        held = store.redis.strlen(keys.aside(generation, owners[0])) // 16
        us = {name: timed(fn, args.runs) / len(owners) * 1e6 for name, fn in deliveries.items()}
        report.add(f"  with {held} replies aside, µs", "")
        for name, value in us.items():
            report.add(f"    {name}", round(value, 2), f"{ratio(value, us['post']):.2f} x a post")
        worst = max(worst, *(ratio(us[name], us["post"]) for name in us))
        store.redis.delete(*store.redis.keys("ta:*"))

        report.add("2. a follow and an unfollow of u, µs per operation", "")
        costs = {}
        for moved in (0, 1, 10, 100):
            follow, unfollow = [], []
            for _ in range(args.runs):
                for _ in range(moved):  # m replies to u, aside
                    deliver(U)()
                started = time.perf_counter()
                apply([Mutation(Op.FOLLOWED, owners, seq=next(seq), authors=(U,))])
                follow.append(time.perf_counter() - started)
                started = time.perf_counter()
                apply([Mutation(Op.UNFOLLOWED, owners, seq=next(seq), authors=(U,))])
                unfollow.append(time.perf_counter() - started)
                # The replies aside go (deleted), for the next m.
                aside = store.redis.keys("ta:*")
                if aside:
                    store.redis.delete(*aside)
            costs[moved] = statistics.median(follow) / len(owners) * 1e6
            report.add(
                f"  {moved} replies to u aside: follow / unfollow",
                f"{costs[moved]:.2f} / {statistics.median(unfollow) / len(owners) * 1e6:.2f}",
            )
        report.check("a reply's delivery within 1.1 x a post's", worst <= 1.1)
        report.print()
        print(f"report: {report.save()}")
        return 0
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
