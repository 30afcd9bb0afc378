"""Spark settings an operator gives reach a real session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fanout import embedded
from spark.session import ROCKSDB


@pytest.mark.spark
def test_a_setting_in_pyspark_submit_args_reaches_the_session(tmp_path: Path) -> None:
    """A real session in its own process: the operator's ``--conf`` turns the UI
    on, which Starling's defaults turn off."""
    script = (
        "from spark.session import build_session\n"
        "s = build_session('local[1]', 'starling-conf-test')\n"
        "print(s.conf.get('spark.ui.enabled'), s.conf.get('spark.ui.port'), "
        "s.conf.get('spark.sql.streaming.stateStore.providerClass'))\n"
        "s.stop()\n"
    )
    port = embedded.free_port()
    env = {
        **os.environ,
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.ui.enabled=true --conf spark.ui.port={port} "
        "pyspark-shell",
        "SPARK_CONF_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.split()[-3:] == ["true", str(port), ROCKSDB], done.stderr[-2000:]
