"""Spark's Python worker daemon, importing PySpark's compiled modules.

Spark starts its Python daemons with its own ``pyspark.zip`` first on
``PYTHONPATH``. Python cannot cache bytecode for modules imported from a
zip, so every new worker process compiles PySpark's sources again: ~0.8 s
of CPU per process on the 2-core machine (docs/performance.md). When that
zip is the one inside the PySpark package installed here (a ``pip install
pyspark``: the same files, with compiled bytecode beside them), this daemon
moves the zips to the end of ``sys.path`` before it hands over to
``pyspark.daemon``, so PySpark is imported from the package. With any other
Spark installation (a cluster's, whose zip may be another version) it
changes nothing.

Set as ``spark.python.daemon.module`` by :mod:`spark.runtime.session` for local
masters. Spark uses it for the executors' workers only: the Python data
source's planning workers still start from ``pyspark.daemon``.
"""

from __future__ import annotations

import runpy
import sys
from importlib.util import find_spec
from pathlib import Path


def installed_zips(path: list[str], package: Path | None) -> list[str]:
    """The entries of ``path`` that are zips inside ``package`` (the directory
    of the installed ``pyspark``): what Spark put there from the same files."""
    if package is None:
        return []
    return [p for p in path if p.endswith(".zip") and Path(p).resolve().is_relative_to(package)]


def _installed_pyspark() -> Path | None:
    """The installed ``pyspark`` package's directory, looked up without the zips."""
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if not p.endswith(".zip")]
    try:
        spec = find_spec("pyspark")
    finally:
        sys.path[:] = saved
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def main() -> None:
    moved = installed_zips(sys.path, _installed_pyspark())
    sys.path[:] = [p for p in sys.path if p not in moved] + moved
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
