"""What the join hands the sink: bundles, and how they are routed (pure: no I/O).

The operator (spark.stream.operator) emits, per state bucket and micro-batch, the
bucket's output as *bundles*, each a JSON object in one binary column:

* one **first** bundle: the tweet bodies to put, the bodies to delete, the
  pulled authors' lists, the tweets' counts (fanout.model.engagements), the
  dead letters, the relay marks and the batch's highest ``seq`` and newest
  timestamp. The sink writes these in the
  operator's own stage, before any timeline write that refers to them (in
  a large micro-batch, before any timeline write at all): a reader never
  finds an id without its body, nor a follower told to read a list that is
  not there, and a deleted tweet's body is gone before its removals reach
  any timeline.
* one **timeline** bundle per sink partition holding some of its owners:
  the timeline mutations, each cut down to the owners of that partition
  (:func:`owner_part`). For a large micro-batch the sink shuffles them by
  partition, so every timeline is written by one task, once (spark.stream.sink).

Why the owners are routed: a bucket's followers are everywhere, so when each
task wrote its own buckets' mutations, most timelines got two writes per
micro-batch, and the second landed among the first's entries: the script
then decodes, merges and re-packs the newest entries, where a single write
is an append (measured: the second share cost 2.4 times the first in Redis,
0.26 s against 0.11 s per 20,000-post micro-batch; docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from fanout.model.engagements import Counts
from fanout.model.join import Mutation, Op

#: The route of a first bundle: it is written where it is made, never shuffled.
FIRST = -1


@dataclass
class Bundle:
    """One bucket's output (or one part of it: :func:`split`) for one micro-batch."""

    seq: int = 0  # highest outbox seq among its events
    ts: int = 0  # newest Kafka timestamp (ms) among its records
    ignored: int = 0
    bodies: dict[int, bytes] = field(default_factory=dict)
    mutations: list[Mutation] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    #: The relay marks among its records, per ``topic/partition`` (fanout.model.watermark).
    marks: dict[str, int] = field(default_factory=dict)
    #: Tweets' (likes, reposts, replies) that changed: written as they are (all 0: deleted).
    counts: dict[int, Counts] = field(default_factory=dict)


def encode_bundle(b: Bundle) -> bytes:
    return orjson.dumps(
        {
            "s": b.seq,
            "t": b.ts,
            "i": b.ignored,
            "b": [[k, v.decode()] for k, v in b.bodies.items()],
            "m": [
                [
                    int(m.op),
                    m.owners,
                    m.tweets,
                    m.horizon,
                    m.seq,
                    m.as_of,
                    m.authors,
                    m.reposts,
                    m.actor,
                    m.quiet,
                    m.answers,
                ]
                for m in b.mutations
            ],
            "d": b.dead_letters,
            "k": b.marks,
            "c": [[t, *counted] for t, counted in b.counts.items()],
        }
    )


def decode_bundle(raw: bytes) -> Bundle:
    obj = orjson.loads(raw)
    return Bundle(
        seq=obj["s"],
        ts=obj["t"],
        ignored=obj["i"],
        bodies={k: v.encode() for k, v in obj["b"]},
        mutations=[
            Mutation(
                Op(m[0]),
                tuple(m[1]),
                tuple(m[2]),
                m[3],
                m[4],
                m[5],
                tuple(m[6]),
                tuple(map(tuple, m[7])),
                m[8],  # actor
                m[9],  # quiet
                tuple(map(tuple, m[10])),  # answers
            )
            for m in obj["m"]
        ],
        dead_letters=obj["d"],
        marks=obj.get("k", {}),
        counts={t: (likes, reposts, replies) for t, likes, reposts, replies in obj.get("c", [])},
    )


def owner_part(owner: int, parts: int) -> int:
    """The sink partition that writes ``owner``'s timeline. User ids are
    sequential (the database's), so the remainder spreads them evenly; only
    the balance between tasks depends on it, never a result."""
    return owner % parts


#: Mutations written with the bodies, before any timeline's (see the module docstring).
_FIRST_OPS = (Op.DELETE_BODY, Op.LIST)


def split(out: Bundle, parts: int) -> tuple[Bundle, list[Bundle]]:
    """``out`` as its first bundle and one timeline bundle per sink partition
    (empty where no owner of ``out`` is in it). Each owner's mutations keep
    their order, which is all the store's grouping needs
    (fanout.store.ops.group_by_timeline)."""
    first = replace(out, mutations=[])
    timelines = [Bundle() for _ in range(parts)]
    for m in out.mutations:
        if m.op in _FIRST_OPS:
            first.mutations.append(m)
        elif len(m.owners) <= 1 or parts == 1:
            timelines[owner_part(m.owners[0], parts) if m.owners else 0].mutations.append(m)
        else:
            cut: list[list[int]] = [[] for _ in range(parts)]
            for owner in m.owners:
                cut[owner_part(owner, parts)].append(owner)
            for bundle, owners in zip(timelines, cut, strict=True):
                if owners:
                    bundle.mutations.append(replace(m, owners=tuple(owners)))
    return first, timelines
