"""The monitoring files of deploy/monitoring: Prometheus' configuration and
alert rules checked and their behaviour tested by promtool (Prometheus' own
tool, installed by `make check-promtool`), and the Grafana dashboard's
queries naming only metrics that Starling exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "starling.json"


def promtool(*args: str, cwd: Path = MONITORING) -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not found: `make check-promtool` installs it (Debian: prometheus)")
    done = subprocess.run(
        [tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_alert_rules_load() -> None:
    out = promtool("check", "rules", "alerts.yml")
    assert "SUCCESS: 10 rules found" in out


def test_the_alert_rules_fire_when_they_should_and_only_then() -> None:
    """alerts_test.yml feeds series to the rules and states the alerts expected."""
    assert "SUCCESS" in promtool("test", "rules", "alerts_test.yml")
    tested = {
        case["alertname"]
        for test in yaml.safe_load((MONITORING / "alerts_test.yml").read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    }
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"][0]["rules"]
    assert tested == {rule["alert"] for rule in rules}, "every alert has a test case"


def test_the_prometheus_configuration_loads(tmp_path: Path) -> None:
    # The token is the compose secret mounted in the container: point the check at a
    # file here (docker-compose.yml mounts it where prometheus.yml says: test_compose).
    token = tmp_path / "metrics-token"
    token.write_text("t")
    config = (MONITORING / "prometheus.yml").read_text()
    assert "credentials_file: /run/secrets/metrics_token" in config
    local = config.replace("/run/secrets/metrics_token", str(token))
    (tmp_path / "prometheus.yml").write_text(local)
    shutil.copy(MONITORING / "alerts.yml", tmp_path / "alerts.yml")
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def rule_queries() -> list[str]:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"][0]["rules"]
    return [rule["expr"] for rule in rules]


def starling_metric_names(queries: list[str]) -> set[str]:
    return {name for q in queries for name in re.findall(r"\bstarling_[a-z_]+", q)}


def test_the_dashboard_is_provisioned_with_the_prometheus_data_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    source = yaml.safe_load(
        (MONITORING / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"][0]
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    assert uids == {source["uid"]}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert starling_metric_names(dashboard_queries()) >= {
        "starling_http_request_duration_seconds_bucket",
        "starling_freshness_seconds",
        "starling_outbox_backlog",
    }
