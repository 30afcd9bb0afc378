"""The production deployment, checked without a container engine.

docker-compose.yml against the Compose specification's JSON schema, the settings every
process reads against what the services set, which secrets each service gets (as files,
and nothing else), the networks, pinned images, commands that name modules, management
commands and options that exist, the volumes the Spark job needs, and
``manage.py check --deploy`` under ``feed.settings_production``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import runpy
import secrets
import shlex
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from fanout.config import KAFKA_CLIENT_ENV, StarlingConfig
from fanout.kafka import topic_configs
from feed.devstack.kafka import replication_settings
from spark.runtime.jvm_archive import ENV as JVM_ARCHIVE_ENV

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"
#: The Compose specification's schema, vendored unmodified from
#: github.com/compose-spec/compose-spec (schema/compose-spec.json, Apache-2.0: see
#: compose-spec.LICENSE beside it).
SCHEMA = Path(__file__).with_name("compose-spec.json")

#: Where the code reads its environment (tests read it too, but run elsewhere).
CODE_DIRS = ("feed", "fanout", "spark")

#: The compose deployment's Kafka cluster: three nodes, each broker and controller.
KAFKA_NODES = ("kafka-1", "kafka-2", "kafka-3")

# Every environment variable the code reads is in one of these groups; a new variable
# fails test_every_variable_the_code_reads_is_accounted_for until it is placed.

#: Set explicitly, with a value, in the environment of every service running the
#: application (APP_ROLES): they must agree between processes. None is a secret.
APP_REQUIRED = {
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_ALLOWED_HOSTS",
    "DATABASE_URL",
    "REDIS_URL",
    "KAFKA_BOOTSTRAP_SERVERS",
    "KAFKA_SECURITY_PROTOCOL",
    "KAFKA_SASL_MECHANISM",
    "KAFKA_SASL_USERNAME",
    "STARLING_TOPIC_PREFIX",
    "STARLING_PARTITIONS",
    "STARLING_TIMELINE_SIZE",
    "STARLING_TIMELINE_SLACK",
    "SPARK_MASTER",
    "STARLING_VAR_DIR",
}
#: May be set to the empty string.
ALLOWED_EMPTY = {"STARLING_TOPIC_PREFIX"}
#: Set by the image (Dockerfile ENV).
IMAGE_ENV = {"STATIC_ROOT", "DJANGO_SETTINGS_MODULE", "STARLING_VAR_DIR"}
#: Set for one service only.
PER_SERVICE = {
    "STARLING_SHUFFLE_PARTITIONS": ("fanout",),
    "PYSPARK_SUBMIT_ARGS": ("fanout",),
    # Metrics of several processes (granian workers, Celery's pool), summed per scrape.
    "PROMETHEUS_MULTIPROC_DIR": ("web", "worker"),
    "STARLING_WORKER_METRICS_PORT": ("worker",),
}
#: Secrets the code reads, each given to a container only as a file: the compose secret
#: whose file ``<NAME>_FILE`` names (fanout.config.Env reads it).
SECRETS = {
    "DJANGO_SECRET_KEY": "django_secret_key",
    "DJANGO_SECRET_KEY_FALLBACKS": "django_secret_key_fallbacks",
    "DATABASE_PASSWORD": "postgres_password",
    "REDIS_PASSWORD": "redis_password",
    "KAFKA_SASL_PASSWORD": "kafka_password",
    "STARLING_METRICS_TOKEN": "metrics_token",
}
#: Which secrets each service gets: exactly these, none other.
SECRETS_OF: dict[str, set[str]] = {
    "postgres": {"postgres_password"},
    "redis": {"redis_password"},
    **{node: {"kafka_password"} for node in KAFKA_NODES},
    "spark-master": set(),
    # Executors get the credentials with their tasks, from the driver.
    "spark-worker": set(),
    "migrate": {"django_secret_key", "postgres_password", "kafka_password"},
    "web": {
        "django_secret_key",
        "django_secret_key_fallbacks",
        "postgres_password",
        "redis_password",
        "kafka_password",
        "metrics_token",
    },
    "worker": {"django_secret_key", "postgres_password", "redis_password", "kafka_password"},
    # Celery beat only sends messages to the broker.
    "beat": {"django_secret_key", "redis_password"},
    # The Spark driver: Kafka in, Redis out; no Django.
    "fanout": {"redis_password", "kafka_password"},
    "prometheus": {"metrics_token"},
    "grafana": {"grafana_admin_password"},
}
#: The user each secret's file belongs to: the one the service's process runs as.
SECRET_UID = {
    "postgres": "0",  # the entrypoint reads it as root, before it drops to postgres
    "redis": "0",  # the command writes redis' config file as root (then drops)
    **{node: "1000" for node in KAFKA_NODES},  # appuser
    "prometheus": "65534",  # nobody
    "grafana": "472",
}
APP_UID = "10001"  # the app image's starling user (Dockerfile)
#: The roles of the application: they all get APP_REQUIRED and the optional settings.
APP_ROLES = ("migrate", "web", "worker", "beat", "fanout")
#: The code's default suits production; an operator may set them in .env, from which
#: compose passes each (``NAME: ${NAME:-}``) to every application role; none is a secret,
#: and .env.example names them.
OPTIONAL = {
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    "DJANGO_SECURE_PROXY_SSL_HEADER",
    "DJANGO_SECURE_SSL_REDIRECT",
    "DJANGO_SECURE_HSTS_SECONDS",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "DJANGO_SECURE_HSTS_PRELOAD",
    "DATABASE_CONN_MAX_AGE",
    "DATABASE_LOCK_TIMEOUT",
    "REDIS_CLUSTER_URLS",
    "STARLING_REDIS_SHARDS",
    "STARLING_LOG_LEVEL",
    "STARLING_LOG_FORMAT",
    "STARLING_TOKEN_TTL",
    "STARLING_READ_YOUR_WRITES_WAIT",
    "STARLING_OUTBOX_RETENTION_DAYS",
    "STARLING_TOMBSTONE_RETENTION_HOURS",
    "STARLING_ACTIVE_DAYS",
    "STARLING_PULL_THRESHOLD",
    "STARLING_NODE_ID",
    "STARLING_RATE_WRITE_USER",
    "STARLING_RATE_WRITE_IP",
    "STARLING_RATE_LOGIN_IP",
    "STARLING_RATE_LOGIN_USER",
    "STARLING_NUM_PROXIES",
}
#: Read by the code, not passed by the compose file (docs/deploy.md says so and why).
NOT_PASSED = {
    # Read as they are (not through Env): an empty value would mean something.
    "SPARK_CONF_DIR": "a directory to mount: add it with the mount",
    "SPARK_HOME": "pyspark's own installation in the image",
    "STARLING_JVM_ARCHIVE": "the image's archive; empty would turn it off",
    # The compose deployment's own broker and Kafka: set by the file itself.
    "CELERY_BROKER_URL": "REDIS_URL, with REDIS_PASSWORD, is the broker",
    **{
        name: "the compose Kafka is SASL_PLAINTEXT with SCRAM; TLS needs a broker of its own"
        for name in KAFKA_CLIENT_ENV
        if name.startswith("KAFKA_SSL_")
    },
    "KAFKA_CLIENT_ID": "librdkafka's default",
}
#: Read by the code, deliberately not part of the production deployment.
NOT_FOR_PRODUCTION = {
    # feed.settings_production forces DEBUG off.
    "DJANGO_DEBUG": "production settings ignore it",
    # manage.py runstack, the embedded stack of `make run`.
    "PORT": "make run only",
    "HOST": "make run only",
    "WEB_HOST": "make run only",
    "WEB_PORT": "make run only",
    "WEB_WORKERS": "make run only (compose uses the name for granian's --workers)",
    "PATH": "make run only (puts the virtualenv's bin first)",
    # spark.runtime.session sets them to sys.executable: the image's Python, on every node.
    "PYSPARK_PYTHON": "defaults to the running interpreter",
    "PYSPARK_DRIVER_PYTHON": "defaults to the running interpreter",
    "PYSPARK_GATEWAY_PORT": "set by spark-submit for the Python driver it starts",
    "SPARK_REUSE_WORKER": "set by PySpark's worker daemon in the workers it starts",
    # feed.devstack: the embedded stack (make run, tests, benchmarks); compose runs Kafka.
    "STARLING_EMBEDDED_KAFKA_NODES": "make run only (one or three embedded Kafka nodes)",
    "JAVA_HOME": "the Java the embedded Kafka broker runs on (make run, tests)",
}
#: Named in README.md's Configuration table, read by others than Starling's code.
COMPOSE_ONLY = {"DJANGO_SETTINGS_MODULE", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "SPARK_HOME"}
#: Run the app image without the application's settings: the Spark master runs no
#: Starling code, and the workers' executors get Starling's settings from the driver.
NO_APP_ENV = {"spark-master", "spark-worker"}
#: The networks: the stores, Kafka, Spark and the roles on backend; Prometheus and Grafana
#: on monitoring with their scrape targets; the Kafka controllers on kafka-quorum.
NETWORKS = {
    "backend": {
        "postgres",
        "redis",
        *KAFKA_NODES,
        "spark-master",
        "spark-worker",
        "migrate",
        "web",
        "worker",
        "beat",
        "fanout",
    },
    "monitoring": {"prometheus", "grafana", "web", "worker"},
    # The Kafka controllers' quorum: the Kafka nodes only.
    "kafka-quorum": set(KAFKA_NODES),
}

ENV_READ = re.compile(
    r"""(?:
        os\.environ\.get\(\s* | os\.environ\.setdefault\(\s* | os\.environ\[\s* | os\.getenv\(\s*
        | \benv\.get\(\s* | \b_required\(\s*
        | \b(?:env|read|Env\([a-z]*\))\.(?:raw|text|int|float|bool|list|choice)\(\s*
    )["']([A-Z][A-Z0-9_]*)["']""",
    re.VERBOSE,
)
INTERPOLATION = re.compile(
    r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)


# --- loading --------------------------------------------------------------------------


def parse_env_file(path: Path) -> tuple[dict[str, str], set[str]]:
    """The values of an env file, and every name it mentions (also in comments)."""
    values: dict[str, str] = {}
    mentioned: set[str] = set()
    for line in path.read_text().splitlines():
        stripped = line.strip()
        match = re.match(r"#?\s*([A-Z][A-Z0-9_]*)=(.*)$", stripped)
        if not match:
            continue
        mentioned.add(match[1])
        if not stripped.startswith("#"):
            values[match[1]] = match[2]
    return values, mentioned


def required_variables() -> set[str]:
    """The variables compose refuses to run without (``${X:?...}`` / ``${X?...}``)."""
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\?", COMPOSE.read_text()))


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's variable interpolation (the subset docker-compose.yml uses)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name = match[1] or match[4]
        op, arg = match[2], match[3] or ""
        current = env.get(name)
        unset_or_empty = not current if op and op.startswith(":") else current is None
        if op in (":-", "-") and unset_or_empty:
            return arg
        if op in (":?", "?") and unset_or_empty:
            raise AssertionError(f"compose would refuse to start: {name}: {arg}")
        return current or ""

    return INTERPOLATION.sub(replace, value)


@cache
def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@cache
def example_env() -> dict[str, str]:
    """.env.example, with placeholders where the operator must fill in a value."""
    values, _ = parse_env_file(ENV_EXAMPLE)
    for name in required_variables():
        if not values.get(name):
            values[name] = "x" * 64 if name == "DJANGO_SECRET_KEY" else f"example-{name.lower()}"
    return values


@cache
def compose() -> dict[str, Any]:
    """docker-compose.yml as compose sees it, with .env copied from .env.example."""
    return interpolate(raw_compose(), example_env())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def app_image() -> str:
    return services()["web"]["image"]


def app_services() -> list[str]:
    return [name for name, svc in services().items() if svc.get("image") == app_image()]


def environment(service: Mapping[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: None if v is None else str(v) for k, v in env.items()}


def env_files(service: Mapping[str, Any]) -> list[str]:
    files = service.get("env_file") or []
    files = [files] if isinstance(files, str) else files
    return [f if isinstance(f, str) else f["path"] for f in files]


def argv_lists(command: Any) -> Iterator[list[str]]:
    """The programs a command runs: one argv each, ``sh -c "a && b"`` split up."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:1] in (["CMD"], ["CMD-SHELL"]):
        argv = ["sh", "-c", argv[1]] if argv[0] == "CMD-SHELL" else argv[1:]
    if argv[:2] == ["sh", "-c"]:
        for part in re.split(r"&&|\|\||;|\|", argv[2]):
            words = [w for w in shlex.split(part) if not w.startswith((">", "2>"))]
            if words:
                yield words
    else:
        yield argv


def code_env_reads() -> dict[str, set[str]]:
    """Environment variables read in feed/, fanout/, spark/: name -> files."""
    found: dict[str, set[str]] = {}
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for name in ENV_READ.findall(path.read_text()):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    # Read by name from a table or a constant rather than a literal at the call.
    for name in (*KAFKA_CLIENT_ENV, JVM_ARCHIVE_ENV):
        found.setdefault(name, set()).add("(by name)")
    return found


def dockerfile_env() -> set[str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    names: set[str] = set()
    for line in text.splitlines():
        if line.strip().startswith("ENV "):
            names.update(re.findall(r"([A-Z][A-Z0-9_]*)=", line))
    return names


# --- the Compose specification --------------------------------------------------------


def test_compose_file_follows_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(compose())
    ]
    assert not errors, "\n".join(errors)


def test_compose_file_and_schema_are_what_they_claim() -> None:
    # A schema that accepts anything would make the test above pass vacuously.
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    assert not validator.is_valid({"services": {"web": {"image": "x", "no_such_key": 1}}})
    assert not validator.is_valid(
        {"services": {"a": {"image": "x", "depends_on": {"b": {"condition": "started"}}}}}
    )
    assert set(services()) >= {"postgres", "redis", *KAFKA_NODES, "spark-master", "spark-worker"}
    assert set(services()) >= {"migrate", "web", "worker", "beat", "fanout"}


def test_every_required_variable_is_in_the_example() -> None:
    values, _ = parse_env_file(ENV_EXAMPLE)
    required = required_variables()
    assert required >= {"DJANGO_ALLOWED_HOSTS", "KAFKA_CLUSTER_ID"}
    assert not required - set(values), ".env.example must name every ${X:?} of the compose file"
    # Secrets are not interpolated into the file: compose reads them as secrets only.
    assert not {name for name in required if re.search(r"SECRET|PASSWORD|TOKEN", name)}


# --- environment ----------------------------------------------------------------------


def test_every_variable_the_code_reads_is_accounted_for() -> None:
    reads = code_env_reads()
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "STARLING_TIMELINE_SIZE"} <= set(
        reads
    )
    assert {"DATABASE_PASSWORD", "REDIS_PASSWORD"} <= set(reads)
    known = (
        APP_REQUIRED
        | IMAGE_ENV
        | set(PER_SERVICE)
        | set(SECRETS)
        | OPTIONAL
        | set(NOT_PASSED)
        | set(NOT_FOR_PRODUCTION)
    )
    unknown = {name: sorted(files) for name, files in reads.items() if name not in known}
    assert not unknown, (
        f"environment variables read by the code but unknown to the deployment: {unknown}; "
        "set them in docker-compose.yml (APP_REQUIRED / PER_SERVICE / OPTIONAL), give them "
        "as a secret (SECRETS), set them in the Dockerfile (IMAGE_ENV), or say why not "
        "(NOT_PASSED) and classify them here"
    )
    # A secret is never also a plain setting.
    plain = APP_REQUIRED | IMAGE_ENV | set(PER_SERVICE) | OPTIONAL | set(NOT_PASSED)
    assert not plain & set(SECRETS)


@pytest.mark.parametrize("service", APP_ROLES)
def test_app_service_gets_the_settings_it_needs(service: str) -> None:
    svc = services()[service]
    assert service in app_services()
    env = environment(svc)
    missing = sorted(
        name
        for name in APP_REQUIRED
        if env.get(name) is None or (env[name] == "" and name not in ALLOWED_EMPTY)
    )
    assert not missing, f"{service}: no value for {missing}"
    assert env["DJANGO_SETTINGS_MODULE"] == "feed.settings_production"
    for name, owners in PER_SERVICE.items():
        if service in owners:
            assert env.get(name), f"{service}: no value for {name}"
    # The optional settings, each from .env by name; no env_file, which would hand the
    # container every variable of .env, the secrets with them.
    raw = environment(raw_compose()["services"][service])
    for name in OPTIONAL:
        assert raw.get(name) == f"${{{name}:-}}", f"{service}: {name} is not passed from .env"
    assert not env_files(svc)


def test_the_image_the_example_and_the_docs_cover_the_rest() -> None:
    assert dockerfile_env() >= IMAGE_ENV
    _, mentioned = parse_env_file(ENV_EXAMPLE)
    undocumented = sorted(OPTIONAL - mentioned)
    assert not undocumented, f".env.example does not mention {undocumented}"
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    unexplained = sorted(name for name in NOT_PASSED if f"`{name}`" not in deploy)
    assert not unexplained, f"docs/deploy.md does not say why compose does not pass {unexplained}"


def test_only_the_spark_services_run_the_app_image_without_settings() -> None:
    without = {
        name for name in app_services() if not set(environment(services()[name])) >= APP_REQUIRED
    }
    assert without == NO_APP_ENV
    assert set(app_services()) == NO_APP_ENV | set(APP_ROLES)
    for name in NO_APP_ENV:
        spark = services()[name]
        assert not env_files(spark) and not spark.get("secrets")
        assert not any(re.search(r"SECRET|PASSWORD|TOKEN|AUTH", k) for k in environment(spark))


def test_processes_agree_on_the_shared_settings() -> None:
    values = {
        name: {environment(services()[s]).get(name) for s in APP_ROLES} for name in APP_REQUIRED
    }
    disagree = {name: v for name, v in values.items() if len(v) != 1}
    assert not disagree


# --- secrets --------------------------------------------------------------------------


def secret_sources(service: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The secrets a service lists: source -> its long syntax (short: just the source)."""
    found: dict[str, dict[str, Any]] = {}
    for item in service.get("secrets") or []:
        entry = {"source": item} if isinstance(item, str) else dict(item)
        found[entry["source"]] = entry
    return found


def secret_path(name: str) -> str:
    return f"/run/secrets/{name}"


def test_each_secret_comes_from_env_and_the_example_ships_none() -> None:
    defined = compose()["secrets"]
    assert set(defined) == set().union(*SECRETS_OF.values())
    values, _ = parse_env_file(ENV_EXAMPLE)
    for name, secret in defined.items():
        assert set(secret) == {"environment"}, f"secret {name}: from compose's environment only"
        variable = secret["environment"]
        # Compose refuses to create a container whose secret's variable is not set at all:
        # .env.example sets each (uncommented), and empty, for the operator to fill in.
        assert values.get(variable) == "", f".env.example must set {variable}= (empty)"
    assert {defined[s]["environment"] for s in SECRETS.values()} >= {
        "DJANGO_SECRET_KEY",
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "KAFKA_PASSWORD",
        "STARLING_METRICS_TOKEN",
    }
    assert defined["grafana_admin_password"] == {"environment": "GRAFANA_ADMIN_PASSWORD"}


@pytest.mark.parametrize("service", sorted(SECRETS_OF))
def test_each_service_gets_exactly_its_secrets(service: str) -> None:
    svc = services()[service]
    listed = secret_sources(svc)
    assert set(listed) == SECRETS_OF[service]
    owner = APP_UID if service in app_services() else SECRET_UID.get(service)
    for name, entry in listed.items():
        # At /run/secrets/<name>, readable by the service's user only.
        assert entry.get("target", secret_path(name)) == secret_path(name)
        assert entry.get("uid") == owner, f"{service}: {name} belongs to uid {owner}"
        assert entry.get("mode") == "0o400", f"{service}: {name} must be mode 0o400"
    # Every NAME_FILE variable names a secret the service has, and is NAME_FILE of a secret
    # the code reads (or the image's own: POSTGRES_PASSWORD_FILE, GF_...__FILE).
    env = environment(svc)
    files = {k: v for k, v in env.items() if k.endswith("_FILE")}
    for key, path in files.items():
        assert path in {secret_path(n) for n in listed}, f"{service}.{key}: {path}"
        if service in APP_ROLES:
            variable = key.removesuffix("_FILE")
            assert SECRETS.get(variable) == Path(path or "").name, f"{service}.{key}"
    # ...and every secret it has is read there, or by its command or configuration.
    used = {Path(v or "").name for v in files.values()}
    used |= {n for n in listed if secret_path(n) in json.dumps(svc.get("command"))}
    if service == "prometheus":
        config = (ROOT / "deploy" / "monitoring" / "prometheus.yml").read_text()
        used |= {n for n in listed if f"credentials_file: {secret_path(n)}" in config}
    assert used == set(listed), f"{service}: secrets it is given but does not read"


def test_no_secret_value_reaches_a_container_but_as_its_file() -> None:
    """With a distinct value for each secret in .env, none appears anywhere in the
    services as compose sees them (environment, commands, health checks, labels...):
    compose hands a secret over only as the secret's file."""
    env = dict(example_env())
    variables = {s["environment"] for s in compose()["secrets"].values()}
    marked = {name: f"secret-value-of-{name.lower()}-{secrets.token_hex(8)}" for name in variables}
    env.update(marked)
    seen = json.dumps(interpolate(raw_compose(), env)["services"])
    leaked = sorted(name for name, value in marked.items() if value in seen)
    assert not leaked, f"secret values reach containers otherwise than as files: {leaked}"
    # The source of the check: no ${...} of a secret's variable anywhere in the file.
    text = COMPOSE.read_text()
    assert not [v for v in variables if re.search(rf"\$\{{?{v}\b", text)]


def test_no_secret_is_written_in_the_compose_file() -> None:
    for name, svc in raw_compose()["services"].items():
        for key, value in environment(svc).items():
            if key in SECRETS or re.search(r"SECRET|PASSWORD|AUTH|_TOKEN(_FILE)?$", key):
                # Only the file a secret is in, never a value.
                assert key.endswith("_FILE"), f"{name}.{key} is a secret in the environment"
                assert (value or "").startswith("/run/secrets/"), f"{name}.{key}"
            if value and re.search(r"://[^/\s@]*:[^/\s@]*@", value):
                raise AssertionError(f"{name}.{key}: credentials in a URL")
    for name in APP_ROLES:
        env = environment(services()[name])
        for key in ("DATABASE_URL", "REDIS_URL"):
            parts = urlsplit(env[key] or "")
            assert parts.password is None and "${" not in (env[key] or ""), f"{name}.{key}"
        assert "CELERY_BROKER_URL" not in env
    for ignore in (".gitignore", ".dockerignore"):
        lines = (ROOT / ignore).read_text().splitlines()
        assert ".env" in lines, f"{ignore} must list .env"


# --- the services that read a secret themselves ----------------------------------------


def run_sh_c(script: str, replace: Mapping[str, str], env: Mapping[str, str]) -> str:
    """Run a service's ``sh -c`` script here, its paths swapped for ``replace``'s."""
    for old, new in replace.items():
        script = script.replace(old, new)
    done = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def stub(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


#: The configuration file the redis service's command writes, in its container.
REDIS_CONF = "/tmp/auth.conf"  # noqa: S108 - the container's own /tmp


def test_redis_reads_its_password_from_the_secret_only(tmp_path: Path) -> None:
    redis = services()["redis"]
    argv = redis["command"]
    assert argv[:2] == ["sh", "-c"]
    assert "redis_password" not in json.dumps(environment(redis))
    programs = list(argv_lists(argv))
    server = next(words for words in programs if "redis-server" in words)
    assert server[:4] == ["exec", "docker-entrypoint.sh", "redis-server", REDIS_CONF]
    assert "--requirepass" not in server and "--appendonly" in server
    # The script itself, with its paths here and a stand-in for the image's entrypoint.
    bin_dir = tmp_path / "bin"
    stub(bin_dir, "docker-entrypoint.sh", f'printf "%s\\n" "$@" > {tmp_path}/argv')
    stub(bin_dir, "chown", "exit 0")
    secret = tmp_path / "redis_password"
    paths = {"/run/secrets/redis_password": str(secret), REDIS_CONF: str(tmp_path / "auth")}
    path = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    password = secrets.token_hex(32)
    secret.write_text(password)  # as compose writes it: the value, no newline
    out = run_sh_c(argv[2], paths, path)
    assert out.startswith("exit 0"), out
    assert (tmp_path / "auth").read_text() == f"requirepass {password}\n"
    assert (tmp_path / "auth").stat().st_mode & 0o077 == 0
    started = (tmp_path / "argv").read_text().splitlines()
    assert started[:2] == ["redis-server", str(tmp_path / "auth")]
    assert password not in started and "noeviction" in started
    for refused in ("", "with space", "quote'd", "new\nline"):
        secret.write_text(refused)
        out = run_sh_c(argv[2], paths, path)
        assert out.startswith("exit 1") and "set REDIS_PASSWORD" in out, (refused, out)
    # The health check logs in with the file's password, in redis-cli's environment.
    check = redis["healthcheck"]["test"]
    assert check[0] == "CMD-SHELL" and "REDISCLI_AUTH=" in check[1]
    stub(bin_dir, "redis-cli", f'[ "$REDISCLI_AUTH" = "{password}" ] && echo PONG')
    secret.write_text(password)
    assert run_sh_c(check[1], paths, path).startswith("exit 0")
    secret.write_text("other")
    assert run_sh_c(check[1], paths, path).startswith("exit 1")


def test_grafana_refuses_to_start_without_a_password(tmp_path: Path) -> None:
    grafana = services()["grafana"]
    entrypoint = grafana["entrypoint"]
    assert entrypoint[:2] == ["sh", "-c"] and "command" not in grafana
    env = environment(grafana)
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == secret_path("grafana_admin_password")
    secret = tmp_path / "password"
    run = stub(tmp_path / "bin", "run.sh", "echo grafana started")
    paths = {secret_path("grafana_admin_password"): str(secret), "/run.sh": str(run)}
    secret.write_text("")
    out = run_sh_c(entrypoint[2], paths, {})
    assert out.startswith("exit 1") and "set GRAFANA_ADMIN_PASSWORD" in out, out
    secret.write_text(secrets.token_hex(16))
    assert run_sh_c(entrypoint[2], paths, {}) == "exit 0\ngrafana started\n"
    raw = raw_compose()["services"]["grafana"]
    assert "admin" not in json.dumps(raw.get("environment")).lower().replace("admin_password", "")


def test_prometheus_reads_the_metrics_token_from_its_secret() -> None:
    prometheus = services()["prometheus"]
    assert "entrypoint" not in prometheus and not environment(prometheus)
    assert prometheus["command"][0] == "--config.file=/etc/prometheus/prometheus.yml"
    config = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheus.yml").read_text())
    web = next(job for job in config["scrape_configs"] if job["job_name"] == "starling-web")
    assert web["authorization"]["credentials_file"] == secret_path("metrics_token")
    assert environment(services()["web"])["STARLING_METRICS_TOKEN_FILE"] == secret_path(
        "metrics_token"
    )


def test_kafka_runs_the_sasl_start_script_the_application_logs_in_to() -> None:
    script = (ROOT / "deploy" / "kafka" / "start.sh").read_text()
    assert "KAFKA_CLUSTER_ID" in required_variables()
    for node in KAFKA_NODES:
        kafka = services()[node]
        assert kafka["command"] == ["sh", "/opt/starling/kafka/start.sh"]
        assert mount_of(kafka, "/opt/starling/kafka/start.sh") == (
            "./deploy/kafka/start.sh",
            "/opt/starling/kafka/start.sh",
        )
        assert "./deploy/kafka/start.sh:/opt/starling/kafka/start.sh:ro" in kafka["volumes"]
        env = environment(kafka)
        assert env["KAFKA_SASL_PASSWORD_FILE"] == secret_path("kafka_password")
        # The health check logs in to this node with the client properties the script
        # writes.
        check = " ".join(kafka["healthcheck"]["test"][1:])
        assert "--command-config /tmp/starling-kafka/client.properties" in check
        assert f"--bootstrap-server {kafka['hostname']}:9092" in check
        assert kafka["hostname"] == node == env["KAFKA_ADVERTISED_HOST"]
    # What the nodes serve is what the application is told to use: all three of them.
    bootstrap = ",".join(f"{services()[node]['hostname']}:9092" for node in KAFKA_NODES)
    assert bootstrap == "kafka-1:9092,kafka-2:9092,kafka-3:9092"
    users = {environment(services()[node])["KAFKA_SASL_USERNAME"] for node in KAFKA_NODES}
    assert users == {"starling"}
    for name in APP_ROLES:
        app = environment(services()[name])
        assert app["KAFKA_BOOTSTRAP_SERVERS"] == bootstrap
        assert app["KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert app["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert app["KAFKA_SASL_USERNAME"] == "starling"
    assert 'host="${KAFKA_ADVERTISED_HOST:-kafka}"' in script
    assert 'port="${KAFKA_PORT:-9092}"' in script
    assert 'conf="${KAFKA_CONFIG_DIR:-/tmp/starling-kafka}"' in script
    assert "listeners=SASL_PLAINTEXT://$bind:$port,CONTROLLER://$controller_host:" in script
    # Alone, the script runs one node with its controller on the loopback
    # (tests/deploy/test_kafka_sasl.py runs it so).
    assert 'controller_host="${KAFKA_CONTROLLER_HOST:-127.0.0.1}"' in script


def run_kafka_node(
    tmp_path: Path, env: Mapping[str, str | None], password: str
) -> tuple[dict[str, str], list[str]]:
    """deploy/kafka/start.sh run with a node's environment, its paths moved under
    ``tmp_path`` and stand-ins for the image's ``kafka-storage.sh`` and
    ``kafka-server-start.sh``: the properties it writes and its format command."""
    home = tmp_path / "kafka"
    (home / "bin").mkdir(parents=True)
    stub(home / "bin", "kafka-storage.sh", f'printf "%s\\n" "$@" > {tmp_path}/format')
    stub(home / "bin", "kafka-server-start.sh", f'printf "%s\\n" "$@" > {tmp_path}/start')
    secret = tmp_path / "kafka_password"
    secret.write_text(password)
    run_env = {
        **{k: v for k, v in env.items() if v is not None},
        "PATH": os.environ["PATH"],
        "KAFKA_HOME": str(home),
        "KAFKA_SASL_PASSWORD_FILE": str(secret),
        "KAFKA_LOG_DIRS": str(tmp_path / "data"),
        "KAFKA_CONFIG_DIR": str(tmp_path / "conf"),
    }
    done = subprocess.run(
        ["sh", str(ROOT / "deploy" / "kafka" / "start.sh")],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    props_text = (tmp_path / "conf" / "server.properties").read_text()
    props = dict(line.split("=", 1) for line in props_text.splitlines() if "=" in line)
    assert (tmp_path / "start").read_text().splitlines() == [
        str(tmp_path / "conf" / "server.properties")
    ]
    return props, (tmp_path / "format").read_text().splitlines()


def quorum_alias(node: str) -> str:
    """The node's name on the kafka-quorum network, its only one there."""
    aliases = services()[node]["networks"]["kafka-quorum"]["aliases"]
    assert len(aliases) == 1, node
    return str(aliases[0])


#: The settings of the replication of every topic, the internal ones too.
REPLICATION_KEYS = {
    "default.replication.factor",
    "min.insync.replicas",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
}


def test_the_kafka_nodes_replicate_as_the_tests_cluster_does(tmp_path: Path) -> None:
    """Each node's properties, as start.sh writes them from the node's environment in
    the compose file: three replicas of every topic and two in sync for a write, the
    settings of the suite's three-node cluster (feed.devstack.kafka), one quorum of
    the three controllers on kafka-quorum, the same cluster and user on every node."""
    tested = {k: v for k, v in replication_settings(3).items() if k in REPLICATION_KEYS}
    assert set(tested) == REPLICATION_KEYS
    assert tested["default.replication.factor"] == "3" and tested["min.insync.replicas"] == "2"
    password = secrets.token_hex(16)
    voters: set[str] = set()
    cluster_ids: set[str] = set()
    node_ids: dict[str, str] = {}
    for node in KAFKA_NODES:
        env = environment(services()[node])
        props, format_argv = run_kafka_node(tmp_path / node, env, password)
        assert {k: props[k] for k in REPLICATION_KEYS} == tested, node
        node_ids[node] = props["node.id"]
        voters.add(props["controller.quorum.voters"])
        alias = quorum_alias(node)
        # Clients and replication on the SASL listener (every address of the node),
        # advertised under the node's name on backend; the controller only on its alias
        # on kafka-quorum.
        assert props["listeners"] == f"SASL_PLAINTEXT://:9092,CONTROLLER://{alias}:9093"
        assert props["advertised.listeners"] == f"SASL_PLAINTEXT://{node}:9092"
        assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
        assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
        assert props["controller.listener.names"] == "CONTROLLER"
        assert props["super.users"] == "User:starling;User:ANONYMOUS"
        assert props["auto.create.topics.enable"] == "false"
        # Every node formats its storage with the cluster's id and the SCRAM user (each
        # controller must have the user: whichever leads first writes it).
        assert format_argv[0] == "format"
        cluster_ids.add(format_argv[format_argv.index("--cluster-id") + 1])
        scram = format_argv[format_argv.index("--add-scram") + 1]
        assert scram == f"SCRAM-SHA-512=[name=starling,password={password}]"
    assert sorted(node_ids.values()) == ["1", "2", "3"]
    assert cluster_ids == {"example-kafka_cluster_id"}
    # One quorum, the same on every node: each node's controller, at its alias.
    assert len(voters) == 1
    quorum = dict(voter.split("@") for voter in voters.pop().split(","))
    assert quorum == {node_ids[node]: f"{quorum_alias(node)}:9093" for node in KAFKA_NODES}


def test_alone_the_kafka_start_script_runs_one_node(tmp_path: Path) -> None:
    """Without the quorum's settings the script is the one-node Kafka: its controller
    on the loopback, one copy of every topic."""
    env = {"KAFKA_CLUSTER_ID": "one-node", "KAFKA_ADVERTISED_HOST": "kafka"}
    props, _ = run_kafka_node(tmp_path, env, secrets.token_hex(16))
    tested = {k: v for k, v in replication_settings(1).items() if k in REPLICATION_KEYS}
    assert {k: props[k] for k in REPLICATION_KEYS} == tested
    assert tested["default.replication.factor"] == "1" and tested["min.insync.replicas"] == "1"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "SASL_PLAINTEXT://:9092,CONTROLLER://127.0.0.1:9093"
    # A controller address of its own: the one-node quorum follows it.
    env["KAFKA_CONTROLLER_HOST"] = "kafka-quorum-alias"
    props, _ = run_kafka_node(tmp_path / "elsewhere", env, secrets.token_hex(16))
    assert props["controller.quorum.voters"] == "1@kafka-quorum-alias:9093"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KAFKA_NODE_ID": "one"}, "KAFKA_NODE_ID must be a number"),
        ({"KAFKA_CONTROLLER_QUORUM_VOTERS": "1@a:9093 2@b:9093"}, "must be id@host:port"),
        ({"KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093,b:9093"}, "b:9093 in"),
        ({"KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093,x@b:9093"}, "x@b:9093 in"),
        ({"KAFKA_CONTROLLER_QUORUM_VOTERS": "2@127.0.0.1:9093"}, "does not name this node"),
        ({"KAFKA_CONTROLLER_HOST": "k1", "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@k:93"}, "this node"),
    ],
)
def test_the_kafka_start_script_refuses_a_quorum_without_its_node(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    password = tmp_path / "password"
    password.write_text(secrets.token_hex(16))
    run_env = {
        "PATH": os.environ["PATH"],
        "KAFKA_CLUSTER_ID": "x",
        "KAFKA_SASL_PASSWORD_FILE": str(password),
        "KAFKA_LOG_DIRS": str(tmp_path / "data"),
        "KAFKA_CONFIG_DIR": str(tmp_path / "conf"),
        "KAFKA_HOME": str(tmp_path / "no-kafka"),  # never reached
        **env,
    }
    done = subprocess.run(
        ["sh", str(ROOT / "deploy" / "kafka" / "start.sh")],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()


def test_the_changelogs_take_the_brokers_replication() -> None:
    """ensure_topics creates the changelogs with the brokers' default replication
    factor (-1) and sets neither it nor min.insync.replicas per topic: on the compose
    cluster, three replicas and two in sync, as for the internal topics."""
    config = StarlingConfig.from_env({"STARLING_PARTITIONS": "4"})
    configs = topic_configs(config)
    assert set(configs) == set(config.topics.all())
    for settings in configs.values():
        assert not {k for k in settings if "replica" in k or "insync" in k}
    source = (ROOT / "fanout" / "kafka.py").read_text()
    assert "replication_factor=-1," in source


# --- networks -------------------------------------------------------------------------


def test_networks_keep_monitoring_away_from_the_stores() -> None:
    assert set(compose()["networks"]) == set(NETWORKS)
    members: dict[str, set[str]] = {network: set() for network in NETWORKS}
    for name, svc in services().items():
        networks = svc.get("networks")
        assert networks, f"{name} must name its networks (not compose's default one)"
        for network in networks:
            members[network].add(name)
    assert members == NETWORKS
    for name in ("grafana", "prometheus"):
        assert "backend" not in services()[name]["networks"]


def test_the_kafka_controllers_are_on_an_internal_network_of_their_own() -> None:
    """The controller listener lets in whatever reaches it, as a super user: it is
    only on kafka-quorum, which is internal and joined by the Kafka nodes alone, under
    names that exist there only. Clients and replication stay on backend."""
    networks = compose()["networks"]
    assert networks["kafka-quorum"] == {"internal": True}
    assert not networks["backend"] and not networks["monitoring"]
    aliases = {quorum_alias(node) for node in KAFKA_NODES}
    assert aliases == {f"{node}-quorum" for node in KAFKA_NODES}
    for name, svc in services().items():
        joined = svc["networks"]
        assert ("kafka-quorum" in joined) == (name in KAFKA_NODES), name
        if name in KAFKA_NODES:
            assert set(joined) == {"backend", "kafka-quorum"}
            # Reached by the application on backend, by its service name.
            assert not joined["backend"]
            assert environment(svc)["KAFKA_CONTROLLER_HOST"] == quorum_alias(name)
            assert "ports" not in svc and "expose" not in svc
        elif isinstance(joined, dict):
            named = {a for n in joined.values() if n for a in n.get("aliases", [])}
            assert not named & aliases, name
    assert not aliases & set(services())


def test_dockerfile_runs_as_a_user_and_copies_no_secrets() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    copies = [line.split()[1:-1] for line in lines if line.startswith(("COPY ", "ADD "))]
    for sources in copies:
        for source in sources:
            assert source not in (".", "./", ".env") and not source.startswith("--from")
    assert not {n for n in dockerfile_env() if re.search(r"SECRET|PASSWORD|TOKEN", n)}


# --- images ---------------------------------------------------------------------------


def image_is_pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    name_tag = image.rsplit("/", 1)[-1]
    return ":" in name_tag and name_tag.split(":", 1)[1] not in ("", "latest")


def test_every_image_is_pinned() -> None:
    unpinned = {name: svc.get("image") for name, svc in services().items()}
    unpinned = {name: image for name, image in unpinned.items() if not image_is_pinned(image or "")}
    assert not unpinned
    bases = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert bases and all(image_is_pinned(base) for base in bases)
    assert not image_is_pinned("redis") and not image_is_pinned("redis:latest")


def test_the_app_image_tag_is_the_project_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert app_image().endswith(f":{version}")
    assert parse_env_file(ENV_EXAMPLE)[0]["STARLING_VERSION"] == version
    assert f"${{STARLING_VERSION:-{version}}}" in COMPOSE.read_text()


def test_spark_cluster_runs_the_app_image() -> None:
    # The driver's Spark and Python must be the executors': one image guarantees it.
    assert services()["spark-master"]["image"] == app_image()
    assert services()["spark-worker"]["image"] == app_image()
    import pyspark

    pin = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "pyspark==4.3.*" in pin and pyspark.__version__.startswith("4.3.")


# --- commands -------------------------------------------------------------------------


def click_options(command: Any) -> set[str]:
    return {
        opt
        for param in command.params
        for opt in [*param.opts, *param.secondary_opts]
        if opt.startswith("-")
    }


def check_python(argv: list[str]) -> None:
    if argv[1] == "-m":
        assert importlib.util.find_spec(argv[2]) is not None, f"no module {argv[2]}"
    elif argv[1] == "-c":
        compile(argv[2], "<healthcheck>", "exec")
    elif argv[1] == "manage.py":
        from django.core.management import get_commands

        assert (ROOT / "manage.py").exists()
        assert argv[2] in get_commands(), f"no management command {argv[2]}"
    else:
        raise AssertionError(f"unexpected python invocation {argv}")


def check_celery(argv: list[str]) -> None:
    from celery import Celery
    from celery.app.utils import find_app
    from celery.bin.beat import beat
    from celery.bin.celery import celery
    from celery.bin.control import inspect
    from celery.bin.worker import worker

    assert argv[1] in ("-A", "--app")
    assert isinstance(find_app(argv[2]), Celery), f"-A {argv[2]} is not a Celery app"
    subcommands = {"worker": worker, "beat": beat, "inspect": inspect}
    assert argv[3] in subcommands, f"unexpected celery command {argv[3]}"
    valid = click_options(celery) | click_options(subcommands[argv[3]])
    unknown = [a for a in argv[4:] if a.startswith("-") and a not in valid]
    assert not unknown, f"celery {argv[3]}: unknown options {unknown}"


def check_granian(argv: list[str]) -> None:
    from granian.cli import cli

    valid = click_options(cli)
    unknown = [a for a in argv[1:] if a.startswith("-") and a not in valid]
    assert not unknown, f"granian: unknown options {unknown}"
    module, attr = argv[-1].split(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"no module {module}"
    tree = ast.parse(Path(spec.origin).read_text())
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert attr in assigned, f"{module} defines no {attr}"


def check_spark_class(argv: list[str]) -> None:
    import pyspark

    # pip installs pyspark's scripts next to the interpreter, on the image's PATH too.
    assert (Path(sys.executable).parent / "spark-class").exists()
    entry = argv[1].replace(".", "/") + ".class"
    jars = (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar")
    assert any(entry in zipfile.ZipFile(jar).namelist() for jar in jars), f"no class {argv[1]}"


CHECKS = {
    "python": check_python,
    "celery": check_celery,
    "granian": check_granian,
    "spark-class": check_spark_class,
}


def app_commands() -> Iterator[tuple[str, list[str]]]:
    for name in app_services():
        svc = services()[name]
        for command in (svc.get("command"), (svc.get("healthcheck") or {}).get("test")):
            if command:
                for argv in argv_lists(command):
                    yield name, argv


def test_commands_name_modules_commands_and_options_that_exist() -> None:
    checked = set()
    for service, argv in app_commands():
        program = argv[0]
        if program in ("grep",):
            continue
        assert program in CHECKS, f"{service}: unexpected program {program}"
        CHECKS[program](argv)
        checked.add((service, program))
    # Every role was looked at.
    assert {s for s, _ in checked} == set(app_services())


def test_the_commands_are_the_documented_ones() -> None:
    command = {name: list(argv_lists(services()[name]["command"])) for name in app_services()}
    assert command["migrate"] == [
        ["python", "manage.py", "migrate", "--noinput"],
        ["python", "manage.py", "ensure_topics", "--wait", "60"],
    ]
    assert command["web"] == [
        shlex.split(
            "granian --interface wsgi --host 0.0.0.0 --port 8000 --workers 2 --backpressure 16 "
            "--no-ws feed.wsgi:application"
        )
    ]
    assert command["worker"][0][:4] == ["celery", "-A", "feed", "worker"]
    assert command["beat"][0][:4] == ["celery", "-A", "feed", "beat"]
    assert command["fanout"][0] == shlex.split(
        "python -m spark.stream.job --master spark://spark-master:7077 "
        "--checkpoint /var/lib/starling/checkpoint/fanout"
    )


def test_sh_c_commands_are_split_into_programs() -> None:
    assert list(argv_lists(["sh", "-c", "a x && b 'y z' >/dev/null"])) == [["a", "x"], ["b", "y z"]]
    assert list(argv_lists(["CMD-SHELL", "redis-cli ping | grep -q PONG"])) == [
        ["redis-cli", "ping"],
        ["grep", "-q", "PONG"],
    ]


# --- volumes and start order ----------------------------------------------------------


def mount_of(service: Mapping[str, Any], path: str) -> tuple[str, str]:
    """(volume, mount point) of the volume holding ``path`` in the service."""
    best = ("", "")
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume.get("source", ""), volume["target"]
        if (path + "/").startswith(target.rstrip("/") + "/") and len(target) > len(best[1]):
            best = (source, target)
    return best


def test_the_fanout_checkpoint_is_on_a_named_volume_the_executors_share() -> None:
    argv = next(argv_lists(services()["fanout"]["command"]))
    checkpoint = argv[argv.index("--checkpoint") + 1]
    source, target = mount_of(services()["fanout"], checkpoint)
    assert source in (compose().get("volumes") or {}), f"{checkpoint} is not on a named volume"
    # Executors write the state store into the checkpoint, and the rebuild's author state
    # goes to STARLING_VAR_DIR: both need the same files at the same path on every node.
    assert mount_of(services()["spark-worker"], checkpoint) == (source, target)
    var_dir = environment(services()["fanout"])["STARLING_VAR_DIR"] or ""
    # The rebuild runs in the fanout container (manage.py) or in a Celery worker (the
    # admin's "Timeline rebuilds → Add"): both see the state where the executors write it.
    for name in ("fanout", "spark-worker", "worker"):
        assert mount_of(services()[name], var_dir + "/rebuild") == (source, target), name


def test_stateful_services_keep_their_data_on_named_volumes() -> None:
    named = set(compose()["volumes"])
    for service, path in [
        ("postgres", "/var/lib/postgresql/data"),
        ("redis", "/data"),
        *((node, environment(services()[node])["KAFKA_LOG_DIRS"] or "") for node in KAFKA_NODES),
    ]:
        assert mount_of(services()[service], path)[0] in named, f"{service}: {path}"
    # Each Kafka node its own log dir: a volume of its own.
    kafka_volumes = {
        mount_of(services()[node], environment(services()[node])["KAFKA_LOG_DIRS"] or "")[0]
        for node in KAFKA_NODES
    }
    assert kafka_volumes == {f"{node}-data" for node in KAFKA_NODES}
    assert any("--appendonly" in argv for argv in argv_lists(services()["redis"]["command"]))


def test_depends_on_waits_for_health_or_completion() -> None:
    for name, svc in services().items():
        for target, rule in (svc.get("depends_on") or {}).items():
            condition = rule["condition"]
            assert condition in ("service_healthy", "service_completed_successfully"), name
            if condition == "service_healthy":
                assert "healthcheck" in services()[target], f"{name} waits for {target}'s health"
            else:
                assert services()[target].get("restart") == "no", f"{target} is one-shot"
    for name in ("web", "worker", "beat", "fanout"):
        assert services()[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
    # ensure_topics creates topics of three replicas: every Kafka node must be up.
    for name in ("migrate", "fanout"):
        depends = services()[name]["depends_on"]
        assert {n: depends.get(n) for n in KAFKA_NODES} == {
            n: {"condition": "service_healthy"} for n in KAFKA_NODES
        }, name
    assert not any(services()[node].get("depends_on") for node in KAFKA_NODES)


# --- production settings --------------------------------------------------------------


def run_production_settings(monkeypatch: pytest.MonkeyPatch, **env: str | None) -> dict[str, Any]:
    values: dict[str, str | None] = {
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_ALLOWED_HOSTS": "starling.example.com",
        **env,
    }
    for name, value in values.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    return runpy.run_module("feed.settings_production")


def test_production_settings_are_hardened(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = run_production_settings(monkeypatch, DJANGO_DEBUG="true")
    assert settings["DEBUG"] is False
    assert settings["ALLOWED_HOSTS"] == ["starling.example.com"]
    assert settings["SECURE_SSL_REDIRECT"] and settings["SECURE_HSTS_SECONDS"] > 0
    assert settings["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    assert settings["SESSION_COOKIE_SECURE"] and settings["CSRF_COOKIE_SECURE"]
    assert "whitenoise.middleware.WhiteNoiseMiddleware" in settings["MIDDLEWARE"]
    assert "Manifest" in settings["STORAGES"]["staticfiles"]["BACKEND"]


def test_tls_redirect_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = run_production_settings(
        monkeypatch, DJANGO_SECURE_SSL_REDIRECT="false", DJANGO_SECURE_PROXY_SSL_HEADER="false"
    )
    assert settings["SECURE_SSL_REDIRECT"] is False
    assert settings.get("SECURE_PROXY_SSL_HEADER") is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DJANGO_SECRET_KEY": None}, "DJANGO_SECRET_KEY must be set"),
        ({"DJANGO_SECRET_KEY": "  "}, "DJANGO_SECRET_KEY must be set"),
        ({"DJANGO_SECRET_KEY": "insecure-dev-key-change-me-" + "x" * 32}, "development key"),
        ({"DJANGO_SECRET_KEY": "too-short-" * 4}, "at least 50 characters"),
        ({"DJANGO_SECRET_KEY": "ab" * 40}, "at least 5 distinct"),
        ({"DJANGO_ALLOWED_HOSTS": None}, "DJANGO_ALLOWED_HOSTS must be set"),
        ({"DJANGO_ALLOWED_HOSTS": " , "}, "DJANGO_ALLOWED_HOSTS must be set"),
    ],
)
def test_production_settings_refuse_to_start_without_a_real_key(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str | None], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        run_production_settings(monkeypatch, **env)


def test_manage_py_check_deploy_is_clean() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="feed.settings_production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
        DJANGO_ALLOWED_HOSTS="starling.example.com",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Silenced checks are explained in feed/settings_production.py.
    assert "System check identified no issues" in output, output


def test_production_settings_refuse_to_start_in_a_process_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["DJANGO_SETTINGS_MODULE"] = "feed.settings_production"
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set in production" in result.stderr


def test_the_readme_configuration_table_names_every_variable_the_code_reads() -> None:
    """One complete table for adopters: every variable read by feed/, fanout/
    or spark/ is in README.md's Configuration section, except those that are
    not part of a deployment (NOT_FOR_PRODUCTION says why)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Configuration") : readme.index("## Operations")]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", section))
    missing = set(code_env_reads()) - documented - set(NOT_FOR_PRODUCTION)
    assert not missing, f"add them to README.md's Configuration table: {sorted(missing)}"
    # ...and no row for a variable nothing reads any more (names in a row's text,
    # such as a default's path or a variable of the compose file, may be others).
    named = {row.split("|")[1] for row in section.splitlines() if row.startswith("| `")}
    rows = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", "".join(named)))
    stale = rows - set(code_env_reads()) - set(NOT_FOR_PRODUCTION) - COMPOSE_ONLY
    assert not stale, f"README.md's Configuration table names variables nothing reads: {stale}"


def test_every_install_uses_the_lock_file() -> None:
    """make (the virtual environment, so CI) and the image install the versions
    requirements.lock pins, and it pins every dependency pyproject.toml names."""
    import tomllib

    lock = (ROOT / "requirements.lock").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lock if line.strip() and not line.startswith("#"))
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values()), "exact pins"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    names = {re.split(r"[\[<>=!~;\s]", d, maxsplit=1)[0].lower().replace("_", "-") for d in wanted}
    locked = {n.lower().replace("_", "-") for n in pins}
    assert names <= locked, f"not in requirements.lock (make lock): {sorted(names - locked)}"
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet -c requirements.lock -e '.[dev]'" in makefile
    assert "-c /tmp/build/requirements.lock" in DOCKERFILE.read_text()
