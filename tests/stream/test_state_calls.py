"""Pipelined map state calls against Spark's real state server (spark.stream.state_calls)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from spark.stream.state_calls import WINDOW, _client, get_values, update_values

# The workers cannot import this test module: the processor travels by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS = WINDOW * 2 + 7  # more than two windows


class Probe(StatefulProcessor):
    """Per group: write KEYS entries in one go, read them back with absent keys
    in between, and report what came back."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.map = handle.getMapState("m", "k long", "v binary")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        group = int(key[0])
        list(rows)
        items = [((group * 10_000 + i,), (bytes([i % 251]) * (i + 1),)) for i in range(KEYS)]
        update_values(self.map, items)
        update_values(self.map, items[:3])  # written again: still one entry each
        # Interleaved with keys never written, which must come back as None.
        asked = [k for i, (key, _) in enumerate(items) for k in (key, (-1 - i,))]
        got = get_values(self.map, asked)
        hits, misses = got[::2], got[1::2]
        found = sum(
            1
            for (_, value), hit, miss in zip(items, hits, misses, strict=True)
            if hit is not None and bytes(hit[0]) == value[0] and miss is None
        )
        single = self.map.getValue(items[-1][0])  # the plain API still answers in step
        yield Row(
            group=group,
            found=found,
            pipelined=_client(self.map) is not None,
            single=single is not None and bytes(single[0]) == items[-1][1][0],
        )


@pytest.mark.spark
def test_pipelined_gets_and_updates_round_trip_through_the_state_server(
    spark: Any, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    spark.createDataFrame([(g,) for g in (1, 2, 3)], "g long").write.parquet(str(source))
    results: list[Row] = []
    query = (
        spark.readStream.schema("g long")
        .parquet(str(source))
        .groupBy("g")
        .transformWithState(
            Probe(), "group long, found long, pipelined boolean, single boolean", "Update", "None"
        )
        .writeStream.foreachBatch(lambda df, _: results.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert sorted(results, key=lambda r: r.group) == [
        Row(group=g, found=KEYS, pipelined=True, single=True) for g in (1, 2, 3)
    ]
