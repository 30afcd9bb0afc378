"""The SparkSession every Starling job uses, tuned for small fast micro-batches.

Starling's settings (:data:`TUNING`) are defaults: a setting given to Spark
the usual ways (``spark-defaults.conf`` in ``SPARK_CONF_DIR`` or
``$SPARK_HOME/conf``, ``--conf`` to ``spark-submit``, or ``--conf`` in
``PYSPARK_SUBMIT_ARGS`` for ``python -m spark.stream.job``) wins over them, so an
operator can, for one, turn the web UI on (``spark.ui.enabled=true``, port
``spark.ui.port``, 4040 by default).
"""

from __future__ import annotations

import itertools
import logging
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from fanout.config import Env
from spark.runtime import jvm_archive

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOG4J = Path(__file__).with_name("log4j2.properties")

#: Settings measured on the 2-core machine (docs/performance.md has the figures).
TUNING: dict[str, str] = {
    # transformWithState needs RocksDB. Changelog checkpointing writes the
    # changed keys instead of uploading RocksDB files at every commit.
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Counting rows costs a read per write in RocksDB; nothing here needs the count.
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    "spark.sql.streaming.minBatchesToRetain": "20",
    # Hadoop's local filesystem shells out to `readlink` (FileContext renames)
    # and `chmod` for every checkpoint file it writes, and each of those forks a
    # ~700 MB JVM. The FileSystem-based manager renames without `readlink`, and
    # the optional checksum files double the writes: 25-30% off the per-batch
    # floor measured here (~0.65-0.8 s -> ~0.5 s with few authors).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    "spark.sql.streaming.checkpoint.fileChecksum.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # Python workers and the transformWithState state server talk over a Unix
    # socket instead of loopback TCP: ~10% off a micro-batch with 1,000 authors,
    # whose three state calls each are a round trip.
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


def shuffle_partitions(master: str) -> int:
    """One shuffle partition per core: more only adds per-task overhead here."""
    if master.startswith("local[") and master[6:-1].isdigit():
        return int(master[6:-1])
    if master == "local":
        return 1
    return Env().int("STARLING_SHUFFLE_PARTITIONS", os.cpu_count() or 2, low=1, high=100_000)


def given_settings(env: Mapping[str, str] | None = None) -> set[str]:
    """The Spark settings given outside Starling's code: in ``spark-defaults.conf``
    and as ``--conf`` in ``PYSPARK_SUBMIT_ARGS`` (a process started by
    ``spark-submit`` itself also has them in its JVM: see :func:`build_session`)."""
    env = os.environ if env is None else env
    given: set[str] = set()
    conf_dir = env.get("SPARK_CONF_DIR") or (
        str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else None
    )
    defaults = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    if defaults is not None and defaults.is_file():
        for line in defaults.read_text().splitlines():
            words = line.split(None, 1)
            if words and not words[0].startswith("#"):
                given.add(words[0])
    args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    for flag, value in itertools.pairwise(args):
        if flag in ("--conf", "-c") and "=" in value:
            given.add(value.split("=", 1)[0])
    return given


def session_settings(master: str, conf: Mapping[str, Any], given: set[str]) -> dict[str, str]:
    """What the builder sets: Starling's defaults except those ``given`` by the
    operator, then ``conf`` (the caller's, which always applies)."""
    defaults = {
        **TUNING,
        "spark.driver.extraJavaOptions": " ".join(
            filter(None, [f"-Dlog4j2.configurationFile=file:{LOG4J}", jvm_archive.java_options()])
        ),
        "spark.sql.shuffle.partitions": str(shuffle_partitions(master)),
    }
    if master.startswith("local"):
        # Workers import PySpark's compiled modules instead of compiling its zip
        # in every new process (spark.runtime.worker_daemon). Local masters only: a
        # cluster's executors may not have Starling's code at hand.
        defaults["spark.python.daemon.module"] = "spark.runtime.worker_daemon"
    return {
        **{k: v for k, v in defaults.items() if k not in given},
        **{k: str(v) for k, v in conf.items()},
    }


def submitted_settings() -> dict[str, str]:
    """The settings of the JVM this process was started by, when ``spark-submit``
    started it (its ``--master``, ``--conf``, ``--archives``, ...); else none."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def build_session(master: str, app_name: str, **conf: Any) -> SparkSession:
    """The session on ``master``; under ``spark-submit`` on spark-submit's master
    instead (its ``--master``, like every setting it was given, wins)."""
    # Workers run this interpreter (the virtualenv's), not the system Python,
    # unless told otherwise (spark.pyspark.python, PYSPARK_PYTHON: a packed
    # environment, docs/deploy.md).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = submitted_settings()
    given = given_settings() | set(submitted)
    master = submitted.get("spark.master", master)
    builder = SparkSession.builder.appName(app_name)
    if "spark.master" not in submitted:
        builder = builder.master(master)
    for key, value in session_settings(master, conf, given).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Spark's own chatter; its log4j2.properties (spark/runtime/) says the rest.
    spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return spark
