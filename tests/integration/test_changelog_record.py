"""The job's changelog read packs each record in SQL exactly as the Python
twin the unit tests use does (spark.changelog)."""

from __future__ import annotations

import pytest

from spark.changelog import pack_record, record_column, unpack_record
from tests.unit.test_changelog_record import AWKWARD

pytestmark = pytest.mark.spark


def test_sql_packs_records_as_python_does(spark) -> None:
    df = spark.createDataFrame(
        [tuple(r) for r in AWKWARD],
        "topic string, partition int, offset bigint, timestamp bigint, key binary, "
        "value binary, seq bigint, jk bigint, mark bigint",
    )
    packed = [bytes(row.record) for row in df.select(record_column().alias("record")).collect()]
    assert packed == [pack_record(r) for r in AWKWARD]
    assert [unpack_record(raw) for raw in packed] == AWKWARD
