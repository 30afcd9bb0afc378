"""Arrow batches typed by a Spark DDL string (``"owner long, entries int"``),
for the functions that ``mapInArrow`` runs on the executors."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

_ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "tinyint": pa.int8(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "array<long>": pa.list_(pa.int64()),
}


def fields(schema: str) -> list[tuple[str, str]]:
    """(name, type) pairs of a Spark DDL string such as ``"a long, b binary"``."""
    pairs = [part.strip().split(" ", 1) for part in schema.split(",")]
    return [(name, kind.strip()) for name, kind in pairs]


def names(schema: str) -> list[str]:
    return [name for name, _ in fields(schema)]


def columns(schema: str) -> dict[str, list[Any]]:
    """Empty columns to fill, one per field of ``schema``."""
    return {name: [] for name in names(schema)}


def schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a Spark DDL string."""
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in fields(ddl)])


def batch(data: dict[str, list[Any]], ddl: str) -> pa.RecordBatch:
    """An Arrow batch with exactly the types of ``ddl``."""
    return pa.RecordBatch.from_pydict(data, schema=schema(ddl))
