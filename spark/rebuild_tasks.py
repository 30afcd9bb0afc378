"""The rebuild's executor side: pure Python over Arrow batches (see
:mod:`spark.rebuild` for the stages that use them).

The read decodes records in its read tasks (:class:`DecodedChangelogSource`,
:func:`decode_records`); every other function here is run by ``mapInArrow``:
it takes an iterator of Arrow batches and yields batches of the schema named
beside it (a Spark DDL string).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader

from fanout import events
from fanout.config import StarlingConfig, TopicNames
from fanout.join import newest, rebuilt_author_state, rebuilt_timeline
from fanout.timeline_ops import pack_timeline, visible
from fanout.timelines import store_for
from spark import arrow
from spark.kafka_source import KafkaBatchReader, KafkaChangelogSource, SourceOptions
from spark.offsets import OffsetRange

#: The rebuild's read (:class:`DecodedChangelogSource`): every record decoded
#: where it is read, with its key, for the newest-per-key step (``a`` = the
#: partition and ``b`` = the seq of a relay mark). See :func:`decode_records`.
RECORDS = (
    "key binary, kind string, a long, b long, body binary, seq long, "
    "topic string, partition int, offset long, error string"
)
#: The newest record of each key, decoded: :data:`RECORDS` without the key.
DECODED = RECORDS.split(", ", 1)[1]
#: state_partition: an author's join state, and what of it timelines are made from.
STATE = "join_key long, blob binary, kept array<long>, horizon long, pulled boolean"
#: write_lists_partition: how many pulled authors' lists were written (COUNT).
#: write_timelines_partition: each timeline written, and its length.
WRITTEN = "owner long, entries int"
#: diff_partition: how a rebuilt timeline differs from the live one.
DIFF = "owner long, live_missing boolean, missing int, extra int"
#: bodies_partition: how many tweet bodies were written.
COUNT = "n long"


def _decode(
    topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any
) -> tuple[str, Any, Any, Any, int | None, str | None]:
    """(kind, a, b, body, seq, error) of one record (see :func:`decode_records`)."""
    seq, jk, mark = events.header_numbers(headers)
    if mark is not None:
        return "mark", partition, mark, None, seq, None
    try:
        envelope = events.decode_record(topic, key, value, seq, jk)
    except events.BadEvent as exc:
        return "bad", None, None, None, seq, str(exc)
    ev = envelope.event
    if isinstance(ev, events.TweetPosted):
        return "tweet", ev.author_id, ev.tweet_id, events.tweet_json(ev), seq, None
    if isinstance(ev, events.Followed):
        return "follow", ev.followee_id, ev.follower_id, None, seq, None
    if isinstance(ev, events.TimelineReset):
        return "command", None, None, None, seq, None
    return "gone", None, None, None, seq, None


def decode_records(
    part: OffsetRange,
    keys: list[bytes | None],
    values: list[bytes | None],
    offsets: list[int],
    stamps: list[int],
    headers: list[Any],
    *,
    topics: TopicNames,
) -> pa.RecordBatch:
    """One ``consume()`` call's records of ``part``, decoded (a ``BatchBuilder``
    of :func:`spark.kafka_source.read_range`): ``tweet`` (a=author, b=tweet id,
    body), ``follow`` (a=followee, b=follower), ``gone`` (a tombstone),
    ``mark`` (a=partition, b=the mark's seq), ``command`` (a timeline reset,
    which a rebuild has no use for) or ``bad`` (with the error).

    Decoding where the records are read, from the consumer's own Python
    objects, spares the rebuild a round trip of every record through Spark
    and back into Python after the newest-per-key step."""
    try:
        topic = topics.logical(part.topic)
    except KeyError:
        topic = part.topic  # decoding names it: "unknown topic"
    out: dict[str, list[Any]] = arrow.columns("kind string, a long, b long, body binary")
    seqs: list[int | None] = []
    errors: list[str | None] = []
    for key, value, hdrs in zip(keys, values, headers, strict=True):
        kind, a, b, body, seq, error = _decode(topic, part.partition, key, value, hdrs)
        out["kind"].append(kind)
        out["a"].append(a)
        out["b"].append(b)
        out["body"].append(body)
        seqs.append(seq)
        errors.append(error)
    n = len(offsets)
    return arrow.batch(
        {
            "key": keys,
            **out,
            "seq": seqs,
            "topic": [part.topic] * n,
            "partition": [part.partition] * n,
            "offset": offsets,
            "error": errors,
        },
        RECORDS,
    )


class DecodedChangelogSource(KafkaChangelogSource):
    """``starling-changelog-decoded``: the batch read of the Kafka source with
    every record decoded in its read task (:func:`decode_records`), rows of
    :data:`RECORDS`. Takes the source's options plus ``topicPrefix`` (the
    deployment's topic names)."""

    @classmethod
    def name(cls) -> str:
        return "starling-changelog-decoded"

    def schema(self) -> str:
        return RECORDS

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        raise NotImplementedError(
            "starling-changelog-decoded is read as a batch (the rebuild's read); the "
            "fanout job streams from starling-kafka"
        )

    def reader(self, schema: Any) -> DataSourceReader:
        topics = TopicNames(self.options.get("topicPrefix", ""))
        return KafkaBatchReader(
            SourceOptions.parse(self.options),
            self.options,
            build=functools.partial(decode_records, topics=topics),
        )


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
