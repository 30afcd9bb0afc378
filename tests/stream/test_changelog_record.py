"""The packed changelog record the job hands its join (spark.stream.changelog):
its Python codec, and the job's SQL packing it exactly as Python does."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark.stream.changelog import (
    ChangelogRecord,
    pack_record,
    record_column,
    records_of,
    runs,
    unpack_record,
)

AWKWARD = [
    ChangelogRecord("p.tweets", 0, 0, 1_000, b"12", b'{"id":12}', 7, 3),
    ChangelogRecord("p.follows", 3, 2**40, None, None, None, None, None, 9),
    ChangelogRecord("p.tweets", 1, 5, 0, b"", b"", 0, 0),
    # Bytes that look like the head's separators, in the key and the value.
    ChangelogRecord("p.tweets", 1, 6, 1, b"a|b\n", b"\nx|y\n\n", 1, 2),
    ChangelogRecord("p.tweets", 1, 7, 1, None, b"\xff\x00\n", 1, -4),
    ChangelogRecord("p.timelines", 2, 8, -1, b"\n", None, 2**62, 1),
]


@pytest.mark.parametrize("record", AWKWARD)
def test_a_packed_record_unpacks_to_itself(record: ChangelogRecord) -> None:
    assert unpack_record(pack_record(record)) == record


def test_a_null_and_an_empty_key_stay_apart() -> None:
    null, empty = (ChangelogRecord("t", 0, 0, 0, key, b"v", 1, 1) for key in (None, b""))
    assert pack_record(null) != pack_record(empty)
    assert unpack_record(pack_record(null)).key is None
    assert unpack_record(pack_record(empty)).key == b""


@pytest.mark.spark
def test_sql_packs_records_as_python_does(spark) -> None:
    df = spark.createDataFrame(
        [tuple(r) for r in AWKWARD],
        "topic string, partition int, offset bigint, timestamp bigint, key binary, "
        "value binary, seq bigint, jk bigint, mark bigint",
    )
    packed = [bytes(row.record) for row in df.select(record_column().alias("record")).collect()]
    assert packed == [pack_record(r) for r in AWKWARD]
    assert [unpack_record(raw) for raw in packed] == AWKWARD


def test_runs_group_a_batch_by_bucket_keeping_each_buckets_order() -> None:
    buckets = [5, -2, 5, 0, 7, 5, -2, 0]
    raws = [pack_record(AWKWARD[i % len(AWKWARD)]._replace(offset=i)) for i in range(len(buckets))]
    batch = pa.RecordBatch.from_pydict({"bucket": buckets, "record": raws})
    out = runs(batch.slice(1))  # a sliced batch: its buffers start before its rows
    got = {
        row["bucket"]: list(records_of(row["lengths"], row["records"])) for row in out.to_pylist()
    }
    assert list(got) == sorted(set(buckets[1:]))
    for bucket, records in got.items():
        assert records == [raw for b, raw in zip(buckets[1:], raws[1:], strict=True) if b == bucket]
