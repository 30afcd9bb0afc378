"""``bench_fanout --mix``: the posts-only phases of bench_fanout, then the same
phases with reposts and likes (per post ``--reposts`` reposts and ``--likes``
likes of recent posts: 1 and 5 unless given) and the share ``--replies`` of
posts that answer a recent post (0 unless given), in one run on one job; each
phase's end to end ÷ the store script's ceiling on its own mutations, and the
mix's figures over the posts-only ones. Also the memory of a repost entry and
of a tweet's counts.

    python -m load_tests.bench_fanout --mix --replies 0.33 --reposts 0 --likes 0

is the replies mix: a third of the posts are replies, nothing else.

    python -m load_tests.bench_fanout --mix --lists 0.1 --reposts 0 --likes 0

is the lists mix: between the phases, a tenth of the users make three lists
of 50 members each (drawn by popularity, as follows are): the second phase's
posts reach those lists too."""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from fanout.kafka import ensure_topics
from fanout.model import events, ids, owners
from fanout.model.engagements import counts_json
from fanout.model.join import Mutation, Op
from fanout.store import keys
from fanout.store.ops import entries, timeline_ids
from fanout.store.redis_conn import Client
from fanout.store.timelines import TimelineStore, store_for
from load_tests.fanout_baselines import memory_per_entry
from load_tests.fanout_mix import (
    STORE_WRITES_COUNTS,
    MixedLoad,
    Reactions,
    apply,
    ceilings,
    followers_of,
    mixed,
    mixed_mutations,
)
from load_tests.fanout_rig import (
    Changelog,
    Job,
    deliveries_counter,
    make_tweets,
    phase,
    report_batches,
    start_services,
    stop_services,
    tweet_authors,
    wait_for_seq,
    write_graph,
)
from load_tests.harness import Report, percentile, ratio
from load_tests.network import Popularity


def run_mix(args: argparse.Namespace) -> int:
    workdir, config, services = start_services("fanout-mix", args.pull_threshold)
    params = {k: v for k, v in vars(args).items() if not k.startswith(("celebrity", "viral"))}
    report = Report(
        "bench_fanout_mix",
        params=params | {"store_writes_counts": STORE_WRITES_COUNTS, "timeline_size": 800},
    )
    job: Job | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        rnd = random.Random(args.seed)
        log = Changelog(config)
        pairs = write_graph(log, args.users, args.follows, rnd, report)
        log.flush()
        job = Job(config, workdir, args.max_records)
        wait_for_seq(store, job, log.last_seq, timeout=900)

        gen = ids.IdGenerator(7)
        authors = tweet_authors(args)
        posts = make_tweets(args.backlog, authors, args.users, rnd, gen)
        reactions = Reactions(
            followers_of(pairs),
            args.users,
            random.Random(args.seed + 3),
            args.mix_window,
            reposts=args.reposts,
            likes=args.likes,
            replies=args.replies,
        )
        drafts = make_tweets(args.backlog, authors, args.users, rnd, gen)
        memberships = list_memberships(args.users, args.lists, random.Random(args.seed + 5))
        figures: dict[str, dict[str, Any]] = {}
        between: list[events.Event] = []  # the posts-only steady phase's posts
        stream: list[events.Event] = []
        for name, load_reactions in (("posts", None), ("mix", reactions)):
            # The mix's ids are minted after the posts-only phase's, as a backlog
            # written after it would be: its entries are newer than the timelines'.
            backlog = posts if name == "posts" else (stream := mixed(drafts, reactions, gen))
            if name == "mix" and memberships:  # the lists are made, and filled, first
                for membership in memberships:
                    log.send(membership)
                log.flush()
                wait_for_seq(store, job, log.last_seq, timeout=900)
            delivered, e2e, drain = drain_encoded(log, store, job, backlog)
            load = MixedLoad(
                log,
                args.rate,
                authors,
                args.users,
                random.Random(args.seed + 1),
                gen,
                reactions=load_reactions,
            )
            # The first seconds left out (10 at most), the catch-up after the load too.
            started, warm_up = time.time(), min(10.0, args.seconds / 3)
            steady = [
                b
                for b in phase(log, store, job, args, load, warm_up)
                if b["at"] <= started + args.seconds
            ]
            if name == "posts":
                between = load.written
            figures[name] = {
                "delivered": delivered,
                "e2e": e2e,
                "drain": drain,
                "steady": steady,
                "records": len(backlog),
            }
        job.stop()
        job = None

        streams: list[Sequence[events.Event]] = [posts, between, memberships, stream]
        runs = mixed_mutations(pairs, streams, 800, args.max_records)
        members = [(m.follower_id, m.followee_id) for m in memberships]
        rates = ceilings(store, runs, [*pairs, *members])
        for (name, fig), ceiling, (_, planned) in zip(
            figures.items(), rates[::3], runs[::3], strict=True
        ):
            fig["ceiling"] = ceiling
            fig["planned"] = planned
            label = (
                "posts only"
                if name == "posts"
                else f"mix ({args.reposts} reposts + {args.likes} likes per post, "
                f"{args.replies:.0%} of posts replies, {len(memberships):,} list members)"
            )
            fig["p50"] = report_phase(report, label, name, fig, args)
            fig["share"] = ratio(fig["e2e"], ceiling)
        share = ratio(figures["mix"]["share"], figures["posts"]["share"])
        p50 = ratio(figures["mix"]["p50"], figures["posts"]["p50"])
        report.add(
            "(e2e / ceiling) mix / posts only", round(share, 3), "target >= 0.9", key="share_ratio"
        )
        report.add(
            "micro-batch p50 mix / posts only", round(p50, 3), "target <= 1.1", key="p50_ratio"
        )
        report.add(
            "  reactions made",
            f"{reactions.made[events.REPOST]:,} reposts, {reactions.made[events.LIKE]:,} likes, "
            f"{reactions.made[events.REPLY]:,} replies",
            f"counts written by the store: {'yes' if STORE_WRITES_COUNTS else 'no (not yet)'}",
        )

        generation = store.active_generation() or 1
        mem = memory_per_entry(store.redis, generation, args.users, 2000, rnd)
        report.add(
            "bytes per timeline entry (packed tl:)", round(mem["packed"], 1), key="bytes_per_entry"
        )
        run_mem = run_memory(store, generation, args.users, reactions.repost_ids, rnd)
        report.add(
            "  the run's timelines, tl: + tr: per entry",
            round(run_mem["per_entry"], 1),
            f"{run_mem['repost_share']:.0%} of the entries are reposts, "
            f"{run_mem['pairs_keys']:.0f} tr: keys in the sample",
            key="bytes_per_entry_with_pairs",
        )
        report_entry_memory(report, store, rnd)

        report.check("mix: (e2e / ceiling) >= 0.9 x posts only's", share >= 0.9)
        measured = all(fig["steady"] for fig in figures.values())
        report.check("mix: micro-batch p50 <= 1.1 x posts only's", measured and p50 <= 1.1)
        report.print()
        print(f"report: {report.save()}\njob log: {workdir / 'fanout.log'}")
        return 0
    finally:
        if job is not None:
            job.stop()
        stop_services(services)


def list_memberships(users: int, share: float, rnd: random.Random) -> list[events.Followed]:
    """``share`` of ``users`` each make three lists of 50 members, drawn by
    popularity (lists hold the accounts people follow): their memberships."""
    popular = Popularity(users, rnd)
    out: list[events.Followed] = []
    for owner in sorted(rnd.sample(range(1, users + 1), int(users * share))):
        for number in (1, 2, 3):
            list_owner = owners.list_owner(owners.list_id(owner, number))
            members: set[int] = set()
            while len(members) < min(50, users):
                members.add(popular.draw(rnd))
            out += [events.Followed(list_owner, m) for m in sorted(members)]
    return out


def drain_encoded(
    log: Changelog, store: TimelineStore, job: Job, backlog: Sequence[events.Event]
) -> tuple[int, float, list[dict[str, Any]]]:
    """:func:`~load_tests.fanout_rig.drain_backlog` of records encoded before
    the clock starts: a mixed backlog has eight records per post, and their
    encoding is not the job's time."""
    records = [events.encode(event) for event in backlog]
    before = deliveries_counter(store)
    started = time.time()
    for record in records:
        log.send_record(record)
    log.flush()
    done_at = wait_for_seq(store, job, log.last_seq, timeout=1800)
    delivered = deliveries_counter(store) - before
    return delivered, delivered / (done_at - started), job.batches(since=started)


def report_phase(
    report: Report, label: str, key: str, fig: dict[str, Any], args: argparse.Namespace
) -> float:
    """A phase's backlog and steady figures; returns its steady micro-batch p50."""
    report.add(f"{label}:", "")
    report.add(
        "  backlog records / deliveries",
        f"{fig['records']:,} / {fig['delivered']:,}",
        f"planned by the join outside Spark: {fig['planned']:,}",
    )
    report.add(
        "  end-to-end deliveries/s",
        round(fig["e2e"]),
        f"{len(fig['drain'])} micro-batches",
        key=f"{key}_e2e_per_s",
    )
    report.add(
        "  ceiling: the store's script, same mutations",
        round(fig["ceiling"]),
        "deliveries/s (counts too, where the store writes them)",
        key=f"{key}_script_per_s",
    )
    report.add(
        "  end-to-end / ceiling",
        round(ratio(fig["e2e"], fig["ceiling"]), 3),
        key=f"{key}_ratio_to_script",
    )
    steady = fig["steady"]
    report_batches(report, f"  at {args.rate} posts/s", key, steady)
    report.add(
        "    records behind at most",
        max((b["behind"] for b in steady), default=0),
        f"{sum(b['rows'] for b in steady) / max(1, len(steady)):,.0f} records per micro-batch "
        f"(--max-records {args.max_records:,})",
        key=f"{key}_behind",
    )
    return percentile([b["duration"] for b in steady], 50)


def run_memory(
    store: TimelineStore, generation: int, users: int, reposts: set[int], rnd: random.Random
) -> dict[str, float]:
    """Bytes per entry of a sample of the run's timelines, the pairs (``tr:``)
    beside them included, and the share of their entries that are reposts."""
    client = store.redis
    total = used = reposted = pairs_keys = 0
    for user in rnd.sample(range(1, users + 1), min(2000, users)):
        tag = store.shards.tag_of(user)
        key = keys.timeline(generation, user, tag)
        raw = client.get(key)
        if not isinstance(raw, bytes) or entries(raw) == 0:
            continue
        shown = timeline_ids(raw)
        total += len(shown)
        reposted += sum(1 for t in shown if t in reposts)
        used += int(client.memory_usage(key, samples=0) or 0)
        pairs = int(
            client.memory_usage(keys.timeline_reposts(generation, user, tag), samples=0) or 0
        )
        used += pairs
        pairs_keys += pairs > 0
    return {
        "per_entry": used / total if total else 0.0,
        "repost_share": reposted / total if total else 0.0,
        "pairs_keys": float(pairs_keys),
    }


def entry_memory(
    store: TimelineStore, rnd: random.Random, timelines: int = 200, counted: int = 2000
) -> dict[str, float]:
    """Bytes per post entry, per repost entry and per counted tweet, on
    timelines written here to a spare generation of the same Redis: full
    timelines of posts; full timelines where a third of the entries are
    reposts (each of an original in no timeline: one entry per original, a
    pair each); and ``counted`` tweets' counts (``ct:``), through the store
    where it writes counts, else as the job will write them (SET of the JSON)."""
    client: Client = store.redis
    spare = TimelineStore(client, cap=store.cap, slack=store.slack, shards=store.shards)
    generation = 98
    spare.create_generation(generation)
    gen = ids.IdGenerator(11)
    cap = store.cap
    originals = iter([gen.next_id() for _ in range(timelines * cap)])
    mutations: list[Mutation] = []
    owners = {"posts": range(60_000_001, 60_000_001 + timelines)}
    owners["mixed"] = range(owners["posts"].stop, owners["posts"].stop + timelines)
    repost_ids: set[int] = set()
    for kind, group in owners.items():
        for owner in group:
            entry_ids = [gen.next_id() for _ in range(cap)]
            pairs = (
                tuple((e, next(originals), 0) for e in entry_ids[::3]) if kind == "mixed" else ()
            )
            repost_ids.update(e for e, _, _ in pairs)
            mutations.append(Mutation(Op.ADD, (owner,), tuple(entry_ids), 0, 1, reposts=pairs))
    spare.apply(generation, {}, mutations)
    used = {"posts": 0, "mixed": 0}
    shown = {"posts": 0, "mixed": 0, "reposts": 0}
    for kind, group in owners.items():
        for owner in group:
            tag = store.shards.tag_of(owner)
            key = keys.timeline(generation, owner, tag)
            raw = client.get(key)
            ids_shown = timeline_ids(raw) if isinstance(raw, bytes) else []
            shown[kind] += len(ids_shown)
            shown["reposts"] += sum(1 for t in ids_shown if t in repost_ids)
            for k in (key, keys.timeline_reposts(generation, owner, tag)):
                used[kind] += int(client.memory_usage(k, samples=0) or 0)
    per_post = used["posts"] / max(1, shown["posts"])
    posts_in_mixed = shown["mixed"] - shown["reposts"]
    per_repost = (used["mixed"] - posts_in_mixed * per_post) / max(1, shown["reposts"])

    tweets = [gen.next_id() for _ in range(counted)]
    counts = {
        t: (int(rnd.lognormvariate(3, 2)), int(rnd.lognormvariate(1, 1.5)), 0) for t in tweets
    }
    if STORE_WRITES_COUNTS:
        apply(spare, generation, ({}, [], counts))
    else:
        pipe = client.pipeline(transaction=False)
        for t, three in counts.items():
            pipe.set(keys.counts(t, store.shards.tag_of(t)), counts_json(*three))
        pipe.execute()
    counts_bytes = sum(
        int(client.memory_usage(keys.counts(t, store.shards.tag_of(t)), samples=0) or 0)
        for t in tweets
    )
    return {
        "per_post": per_post,
        "per_repost": per_repost,
        "reposts_shown": float(shown["reposts"]),
        "per_counted_tweet": counts_bytes / counted,
    }


def report_entry_memory(
    report: Report, store: TimelineStore, rnd: random.Random
) -> dict[str, float]:
    mem = entry_memory(store, rnd)
    report.add(
        "bytes per post entry (tl: + tr:, full timelines)",
        round(mem["per_post"], 1),
        "target <= 16",
        key="bytes_per_post_entry",
    )
    report.add(
        "bytes per repost entry (tl: + tr:)",
        round(mem["per_repost"], 1),
        f"target <= 32; {mem['reposts_shown']:,.0f} reposts shown",
        key="bytes_per_repost_entry",
    )
    report.add(
        "bytes per counted tweet (ct:)",
        round(mem["per_counted_tweet"], 1),
        "MEMORY USAGE of the key; " + ("the store's write" if STORE_WRITES_COUNTS else "SET here"),
        key="bytes_per_counted_tweet",
    )
    report.check("a post entry <= 16 bytes", mem["per_post"] <= 16)
    report.check("a repost entry <= 32 bytes", mem["per_repost"] <= 32)
    return mem
