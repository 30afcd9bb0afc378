"""The executors' package (deploy/spark/package.py) holds every third-party
package the Spark code imports, at the lock's versions: an import added to
spark/ or fanout/ without it would fail on a cluster only."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Not in the package, on purpose: the cluster's Spark gives the Python workers
#: pyspark and py4j.
NOT_PACKED = {"pyspark", "py4j"}


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "deploy" / "spark" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\[=<>]", requirement)[0]).lower()


def third_party_imports(*packages: str) -> set[str]:
    found: set[str] = set()
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__", "spark", "fanout"}


def test_every_third_party_import_of_the_spark_code_is_packed() -> None:
    distributions = packages_distributions()
    imported = {
        _name(dist)
        for module in third_party_imports("spark", "fanout")
        for dist in distributions[module]
    }
    packed = {_name(r) for r in _load("package").EXECUTOR_REQUIREMENTS}
    assert imported - NOT_PACKED <= packed, imported - NOT_PACKED - packed
    assert "redis" in imported and "confluent-kafka" in imported  # the scan finds imports


def test_the_packed_requirements_are_pinned_by_the_lock() -> None:
    locked = {
        _name(line)
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    packed = {_name(r) for r in _load("package").EXECUTOR_REQUIREMENTS}
    assert packed <= locked, packed - locked


def test_the_entry_refuses_to_start_without_the_environment_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark starts the executors' interpreter on the driver too, in spark-submit's
    directory: the entry says so before Spark fails on it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", "./environment/bin/python")
    submit = _load("submit")
    assert submit.main(["job"]) == 2
    assert "run spark-submit in the package's directory" in capsys.readouterr().err
    assert submit.main(["nothing"]) == 2 and "usage:" in capsys.readouterr().err
