"""A class data sharing archive for the JVM that PySpark starts: Spark starts in
about two thirds of the time.

    python -m spark.runtime.jvm_archive        (make setup runs it)

A SparkSession's JVM spends most of its start loading and verifying the
same ~20,000 classes from Spark's jars every time. Java's class data sharing
(CDS) maps them, already parsed and verified, from an archive dumped by an
earlier run instead. Measured on a 2-core machine: a session's start 6.0 ->
3.9 s, its first job 2.1 -> 1.1 s (docs/performance.md).

This module dumps the archive once, from a short training run of the kinds
of jobs Starling runs (a Python data source, Arrow batches to and from
Python workers, a shuffle, Parquet), into :func:`archive_path`;
:func:`spark.runtime.session.build_session` points the JVM at it when it is there.
The JVM checks that an archive fits its own version and class path and
quietly starts without it otherwise, so a stale archive (a new JDK, another
PySpark) costs the time it saved, never correctness. ``STARLING_JVM_ARCHIVE``
names another file, or, empty, turns it off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

ENV = "STARLING_JVM_ARCHIVE"


def archive_path(env: Mapping[str, str] | None = None) -> Path | None:
    """Where the archive is (or goes): ``STARLING_JVM_ARCHIVE``, else beside
    the interpreter's environment (it belongs with the PySpark installed
    there); None when turned off."""
    env = os.environ if env is None else env
    value = env.get(ENV)
    if value is not None:
        return Path(value) if value.strip() else None
    return Path(sys.prefix) / "starling-spark.jsa"


def java_options(env: Mapping[str, str] | None = None) -> str:
    """The JVM option that uses the archive, if there is one."""
    path = archive_path(env)
    return f"-XX:SharedArchiveFile={path}" if path is not None and path.is_file() else ""


def _double(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield pa.RecordBatch.from_arrays(
            [pc.multiply(batch.column(0), 2)], names=batch.schema.names
        )


def train(out: Path) -> None:
    """Run the training jobs in a session whose JVM dumps its classes to
    ``out`` as it exits; return once it has exited."""
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from spark.runtime.session import LOG4J, build_session

    spark = build_session(
        "local[2]",
        "starling-jvm-archive",
        **{
            "spark.driver.extraJavaOptions": (
                f"-Dlog4j2.configurationFile=file:{LOG4J} -XX:ArchiveClassesAtExit={out} "
                # Not a warning per class it cannot archive (generated, signed).
                "-Xlog:cds=off,cds+dynamic=off"
            )
        },
    )
    df = spark.range(0, 20_000, numPartitions=2).withColumn("k", F.col("id") % 7)
    doubled = df.select("id").mapInArrow(_double, "id long")
    grouped = df.groupBy("k").agg(F.collect_list("id").alias("ids"), F.count("*").alias("n"))
    joined = doubled.join(F.broadcast(grouped), doubled.id % 7 == grouped.k, "left")
    joined.repartition("k").sortWithinPartitions("k").count()
    path = out.with_suffix(".parquet")
    grouped.write.mode("overwrite").parquet(str(path))
    spark.read.parquet(str(path)).toArrow()
    gateway: Any = SparkContext._gateway
    spark.stop()
    proc = gateway.proc
    proc.stdin.close()  # the JVM exits when its standard input closes, and dumps
    proc.wait(timeout=300)
    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = archive_path()
    if path is None:
        print(f"{ENV} is empty: no JVM archive")
        return 0
    if args[:1] == ["--train"]:  # the child below
        train(Path(args[1]))
        return 0
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    # In a process of its own: the JVM started here must have exited (and
    # written the archive) before the archive is put in place.
    subprocess.run(  # noqa: S603 - our own interpreter, module and path
        [sys.executable, "-m", "spark.runtime.jvm_archive", "--train", str(partial)],
        check=True,
    )
    if not partial.is_file():
        print(f"the JVM wrote no archive to {partial}", file=sys.stderr)
        return 1
    partial.replace(path)
    size = path.stat().st_size / 2**20
    print(f"JVM class archive: {path} ({size:.0f} MiB, {time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
