"""The rebuild's executor side: pure Python over Arrow batches, run by
``mapInArrow`` (see :mod:`spark.rebuild` for the stages that call them).

Each function takes an iterator of Arrow batches and yields batches of the
schema named beside it (a Spark DDL string).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from fanout import events
from fanout.config import StarlingConfig
from fanout.join import newest, rebuilt_author_state, rebuilt_timeline
from fanout.timeline_ops import pack_timeline, visible
from fanout.timelines import store_for
from spark import arrow

#: decode_partition: the newest record of each key, decoded (a = partition and
#: b = seq for a relay mark).
DECODED = (
    "kind string, a long, b long, body binary, seq long, "
    "topic string, partition int, offset long, error string"
)
#: state_partition: an author's join state, and what of it timelines are made from.
STATE = "join_key long, blob binary, kept array<long>, horizon long, pulled boolean"
#: write_lists_partition: how many pulled authors' lists were written (COUNT).
#: write_timelines_partition: each timeline written, and its length.
WRITTEN = "owner long, entries int"
#: diff_partition: how a rebuilt timeline differs from the live one.
DIFF = "owner long, live_missing boolean, missing int, extra int"
#: bodies_partition: how many tweet bodies were written.
COUNT = "n long"


def _decode(row: dict[str, Any], topics: Any) -> tuple[str, Any, Any, Any, str | None]:
    """(kind, a, b, body, error) of one record (see :func:`decode_partition`)."""
    if row["mark"] is not None:
        return "mark", row["partition"], row["mark"], None, None
    try:
        envelope = events.decode_record(
            topics.logical(row["topic"]), row["key"], row["value"], row["seq"], row["jk"]
        )
    except (events.BadEvent, KeyError) as exc:
        return "bad", None, None, None, str(exc)
    ev = envelope.event
    if isinstance(ev, events.TweetPosted):
        return "tweet", ev.author_id, ev.tweet_id, events.tweet_json(ev), None
    if isinstance(ev, events.Followed):
        return "follow", ev.followee_id, ev.follower_id, None, None
    if isinstance(ev, events.TimelineReset):
        return "command", None, None, None, None
    return "gone", None, None, None, None


def decode_partition(batches: Iterator[pa.RecordBatch], topics: Any) -> Iterator[pa.RecordBatch]:
    """The newest record of each key, decoded: ``tweet`` (a=author, b=tweet id,
    body), ``follow`` (a=followee, b=follower), ``gone`` (a tombstone),
    ``mark`` (a=partition, b=the mark's seq), ``command`` (a timeline reset,
    which a rebuild has no use for) or ``bad``."""
    for batch in batches:
        out: dict[str, list[Any]] = arrow.columns(DECODED)
        for row in batch.to_pylist():
            kind, a, b, body, error = _decode(row, topics)
            for name, value in (
                ("kind", kind),
                ("a", a),
                ("b", b),
                ("body", body),
                ("seq", row["seq"]),
                ("topic", row["topic"]),
                ("partition", row["partition"]),
                ("offset", row["offset"]),
                ("error", error),
            ):
                out[name].append(value)
        yield arrow.batch(out, DECODED)


def state_partition(
    batches: Iterator[pa.RecordBatch], cap: int, slack: int, pull_threshold: int
) -> Iterator[pa.RecordBatch]:
    """Per author: the fanout job's state blob, the newest tweets a follow of
    the author merges (or its list holds, if pulled), with their horizon."""
    for batch in batches:
        out: dict[str, list[Any]] = arrow.columns(STATE)
        for row in batch.to_pylist():
            state = rebuilt_author_state(
                row["author"],
                row["followers"] or (),
                row["tweets"] or (),
                pull_threshold=pull_threshold,
            )
            kept, horizon = newest(state.tweets, cap + slack)  # what a follow merges
            out["join_key"].append(row["author"])
            out["blob"].append(state.encode())
            out["kept"].append(list(kept))
            out["horizon"].append(horizon)
            out["pulled"].append(state.pulled)
        yield arrow.batch(out, STATE)


def write_lists_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Write the pulled authors' lists (``join_key``, ``kept``, ``horizon``) into
    ``generation``."""
    store = store_for(config, timeout=120)
    for batch in batches:
        rows = batch.to_pylist()
        n = store.write_lists(
            generation, ((r["join_key"], pack_timeline(r["horizon"], r["kept"])) for r in rows)
        )
        yield arrow.batch({"n": [n]}, COUNT)


def _timelines(
    batch: pa.RecordBatch, cap: int, slack: int, *, ids: str = "ids", floor: str = "floor"
) -> Iterator[tuple[int, int, list[int]]]:
    """(owner, horizon, ids) of each timeline, from the columns ``ids`` and ``floor``."""
    for row in batch.to_pylist():
        horizon, kept = rebuilt_timeline(
            row[ids] or (), cap=cap, slack=slack, floor=row[floor] or 0
        )
        yield row["owner"], horizon, kept


def write_timelines_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Write this partition's timelines into ``generation``; return their lengths
    (-1 for the users idle in the active generation: their timelines stay dropped)."""
    store = store_for(config, timeout=120)
    live = store.active_generation()
    for batch in batches:
        rows = list(_timelines(batch, config.timeline_size, config.timeline_slack))
        owners = [o for o, _, _ in rows]
        idle = store.dropped(live, owners) if live is not None and live != generation else set()
        store.write_timelines(
            generation, ((o, pack_timeline(h, ids)) for o, h, ids in rows if o not in idle)
        )
        store.write_dropped(generation, idle)
        pulls = batch.column("pulls").to_pylist()
        store.write_pulls(generation, ((o, p) for o, p in zip(owners, pulls, strict=True) if p))
        yield arrow.batch(
            {"owner": owners, "entries": [-1 if o in idle else len(ids) for o, _, ids in rows]},
            WRITTEN,
        )


def diff_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, live: int, newest_tweet: int
) -> Iterator[pa.RecordBatch]:
    """Compare what readers see of the rebuilt timelines (the pulled authors'
    lists merged in) with what they see of the live generation's; tweets newer
    than the snapshot are left out of the live side."""
    store = store_for(config, timeout=120)
    cap = config.timeline_size
    for batch in batches:
        rows = list(_timelines(batch, cap, config.timeline_slack, ids="seen", floor="seen_floor"))
        views = store.timelines(live, [o for o, _, _ in rows])
        out: dict[str, list[Any]] = arrow.columns(DIFF)
        for (owner, _, ids), view in zip(rows, views, strict=True):
            want = set(visible(ids, cap))
            have = {i for i in view.ids if i <= newest_tweet} if view else set()
            out["owner"].append(owner)
            out["live_missing"].append(view is None)
            out["missing"].append(len(want - have))
            out["extra"].append(len(have - want))
        yield arrow.batch(out, DIFF)


def bodies_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig
) -> Iterator[pa.RecordBatch]:
    store = store_for(config, timeout=120)
    for batch in batches:
        n = store.write_bodies(
            zip(batch.column("b").to_pylist(), batch.column("body").to_pylist(), strict=True)
        )
        yield arrow.batch({"n": [n]}, COUNT)
