"""The sink's route labels against Spark's own hash partitioning."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F

from spark.stream.sink import route_labels


@pytest.mark.spark
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_each_route_label_lands_in_its_own_sink_partition(spark: Any, parts: int) -> None:
    labels = route_labels(spark, parts)
    assert len(set(labels)) == parts
    rows = (
        spark.createDataFrame([(label,) for label in labels], "route int")
        .repartition(parts, "route")
        .select("route", F.spark_partition_id().alias("partition"))
        .collect()
    )
    assert {row["route"]: row["partition"] for row in rows} == {
        label: p for p, label in enumerate(labels)
    }
