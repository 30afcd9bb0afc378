"""bench_fanout's baselines, on the same Redis and the same mutations: the
store's own script without Spark, raw pipelined APPENDs, sorted sets, and
the memory of a timeline entry."""

from __future__ import annotations

import argparse
import itertools
import random
import time
from collections import defaultdict

from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.join import Mutation, join_events
from fanout.store.keys import timeline as timeline_key
from fanout.store.ops import entries, timeline_ids
from fanout.store.redis_conn import Client
from fanout.store.timelines import TimelineStore


def baseline_mutations(
    pairs: list[tuple[int, int]],
    users: int,
    tweets: list[events.TweetPosted],
    cap: int,
    per_batch: int,
) -> tuple[list[tuple[dict[int, bytes], list[Mutation]]], int]:
    """The job's mutations for ``tweets``, by the same join rules, without Spark."""
    followers: dict[int, set[int]] = defaultdict(set)
    for f, g in pairs:
        followers[g].add(f)
    states = {a: AuthorState(followers=set(fs)) for a, fs in followers.items()}
    batches = []
    total = 0
    seq = itertools.count(1)
    for start in range(0, len(tweets), per_batch):
        by_author: dict[int, list[events.Envelope]] = defaultdict(list)
        for t in tweets[start : start + per_batch]:
            by_author[t.author_id].append(events.Envelope(next(seq), t))
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author, envs in by_author.items():
            result = join_events(author, states.get(author, AuthorState()), envs, cap=cap)
            states[author] = result.state
            bodies.update(result.bodies)
            mutations += result.mutations
        total += sum(m.deliveries for m in mutations)
        batches.append((bodies, mutations))
    return batches, total


def script_rate(
    store: TimelineStore,
    pairs: list[tuple[int, int]],
    backlog: list[events.TweetPosted],
    args: argparse.Namespace,
) -> tuple[list[tuple[dict[int, bytes], list[Mutation]]], float]:
    """The job's mutations for ``backlog`` (same rules, batches of
    ``--max-records``) and the deliveries per second of the store's own script
    applying them to a spare generation of the same Redis (or cluster)."""
    batches, planned = baseline_mutations(pairs, args.users, backlog, 800, args.max_records)
    spare = TimelineStore(store.redis, cap=800, shards=store.shards)
    spare.create_generation(99)
    started = time.perf_counter()
    for bodies, mutations in batches:
        spare.apply(99, bodies, mutations)
    return batches, planned / (time.perf_counter() - started)


def raw_append_rate(client: Client, mutations: list[Mutation], limit: int) -> float:
    """The same deliveries as plain pipelined commands on the packed layout: one
    ``APPEND`` of 8 bytes per delivery, no script, no ordering check, no trim
    (an optimistic bound for raw writes of these mutations)."""
    pipe = client.pipeline(transaction=False)
    done = 0
    started = time.perf_counter()
    for m in mutations:
        for t in m.tweets:
            packed = t.to_bytes(8, "big")
            for owner in m.owners:
                pipe.append(f"ba:{owner}", packed)
                done += 1
                if done % 2000 == 0:
                    pipe.execute()
        if done >= limit:
            break
    pipe.execute()
    return done / (time.perf_counter() - started)


def naive_zset_rate(client: Client, mutations: list[Mutation], cap: int, limit: int) -> float:
    """Pipelined ZADD + ZREMRANGEBYRANK per delivery (the textbook fanout write)."""
    pipe = client.pipeline(transaction=False)
    done = 0
    started = time.perf_counter()
    for m in mutations:
        for owner in m.owners:
            for t in m.tweets:
                key = f"bz:{owner}"
                pipe.zadd(key, {str(t): t})
                pipe.zremrangebyrank(key, 0, -cap - 1)
                done += 1
                if done % 2000 == 0:
                    pipe.execute()
        if done >= limit:
            break
    pipe.execute()
    return done / (time.perf_counter() - started)


def memory_per_entry(
    client: Client, generation: int, users: int, sample: int, rnd: random.Random
) -> dict[str, float]:
    """Bytes per entry of a sample of timelines, packed and as sorted sets."""
    picked = rnd.sample(range(1, users + 1), min(sample, users))
    packed_bytes = total = 0
    ids_by_user: dict[int, list[int]] = {}
    for user in picked:
        key = timeline_key(generation, user)
        raw = client.get(key)
        if not isinstance(raw, bytes) or entries(raw) == 0:
            continue
        packed_bytes += int(client.memory_usage(key, samples=0) or 0)
        total += entries(raw)
        ids_by_user[user] = timeline_ids(raw)
    out = {"packed": packed_bytes / total if total else 0.0, "entries_sampled": float(total)}
    for label, listpack_entries in (("zset_skiplist", 128), ("zset_listpack", 1024)):
        previous = str(client.config_get("zset-max-listpack-entries")["zset-max-listpack-entries"])
        client.config_set("zset-max-listpack-entries", listpack_entries)
        zset_bytes = 0
        for user, tl in ids_by_user.items():
            key = f"bzmem:{user}"
            client.delete(key)
            client.zadd(key, {str(t): t for t in tl})
            zset_bytes += int(client.memory_usage(key, samples=0) or 0)
            client.delete(key)
        client.config_set("zset-max-listpack-entries", previous)
        out[label] = zset_bytes / total if total else 0.0
    return out


# --- the celebrity scenario ------------------------------------------------------------
