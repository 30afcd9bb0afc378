"""Settings given as files (``NAME_FILE``) and passwords given apart from URLs."""

from __future__ import annotations

import runpy
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from kombu.utils.url import parse_url as kombu_parse_url

from fanout.config import ConfigError, Env, StarlingConfig, with_password

ROOT = Path(__file__).resolve().parents[2]
#: Characters a generated password may hold that a URL must not carry as they are.
AWKWARD = "p@ss/w:rd%#?&+ é"


def secret_file(tmp_path: Path, text: str, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- NAME_FILE ---------------------------------------------------------------------------


def test_a_variable_may_be_given_as_a_file(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "s3cret\n")
    read = Env({"DJANGO_SECRET_KEY_FILE": path})
    assert read.raw("DJANGO_SECRET_KEY") == "s3cret"  # the final newline is not part of it
    assert read.text("DJANGO_SECRET_KEY") == "s3cret"
    # Every typed reader goes through raw, so any setting may come from a file.
    ports = Env({"STARLING_PARTITIONS_FILE": secret_file(tmp_path, "8\n", "n")})
    assert ports.int("STARLING_PARTITIONS", 2, low=1, high=64) == 8


def test_the_variable_itself_is_read_as_before(tmp_path: Path) -> None:
    assert Env({"REDIS_PASSWORD": " x "}).raw("REDIS_PASSWORD") == "x"
    assert Env({}).raw("REDIS_PASSWORD") is None
    # An empty variable counts as unset, so the file is read.
    path = secret_file(tmp_path, "from-file")
    assert Env({"REDIS_PASSWORD": "", "REDIS_PASSWORD_FILE": path}).raw("REDIS_PASSWORD") == (
        "from-file"
    )
    # An empty file is an unset value, like an empty variable; so is an empty NAME_FILE.
    empty = secret_file(tmp_path, "\n", "empty")
    assert Env({"REDIS_PASSWORD_FILE": empty}).raw("REDIS_PASSWORD") is None
    assert Env({"REDIS_PASSWORD_FILE": " "}).raw("REDIS_PASSWORD") is None


def test_both_the_variable_and_its_file_are_refused(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "new")
    with pytest.raises(ConfigError, match="REDIS_PASSWORD and REDIS_PASSWORD_FILE are both set"):
        Env({"REDIS_PASSWORD": "old", "REDIS_PASSWORD_FILE": path}).raw("REDIS_PASSWORD")


def test_an_unreadable_file_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"KAFKA_SASL_PASSWORD_FILE: cannot read .*missing"):
        Env({"KAFKA_SASL_PASSWORD_FILE": missing}).raw("KAFKA_SASL_PASSWORD")
    with pytest.raises(ConfigError, match="DATABASE_PASSWORD_FILE: cannot read"):
        Env({"DATABASE_PASSWORD_FILE": str(tmp_path)}).raw("DATABASE_PASSWORD")  # a directory
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="DATABASE_PASSWORD_FILE: cannot read"):
        Env({"DATABASE_PASSWORD_FILE": str(binary)}).raw("DATABASE_PASSWORD")


def test_kafka_credentials_come_from_files_too(tmp_path: Path) -> None:
    config = StarlingConfig.from_env(
        {
            "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": "starling",
            "KAFKA_SASL_PASSWORD_FILE": secret_file(tmp_path, "k-pass\n"),
        }
    )
    assert dict(config.kafka_client())["sasl.password"] == "k-pass"
    assert "k-pass" not in repr(config)


# --- REDIS_PASSWORD ----------------------------------------------------------------------


def test_the_redis_password_goes_into_every_redis_url(tmp_path: Path) -> None:
    config = StarlingConfig.from_env(
        {
            "REDIS_URL": "redis://redis:6379/0",
            "REDIS_CLUSTER_URLS": "redis://r1:6379,redis://app@r2:6379",
            "REDIS_PASSWORD_FILE": secret_file(tmp_path, AWKWARD + "\n"),
        }
    )
    # Quoted in the URL, and what both of its readers (redis-py, Celery's kombu) decode.
    assert urlsplit(config.redis_url).hostname == "redis"
    assert redis.connection.parse_url(config.redis_url)["password"] == AWKWARD
    assert kombu_parse_url(config.redis_url)["password"] == AWKWARD
    first, second = config.redis_cluster_urls
    assert redis.connection.parse_url(first)["password"] == AWKWARD
    assert redis.connection.parse_url(second) | {"password": "?"} == {
        "username": "app",
        "password": "?",
        "host": "r2",
        "port": 6379,
    }
    assert redis.connection.parse_url(second)["password"] == AWKWARD
    assert AWKWARD not in repr(config) and "%40" not in repr(config)


def test_without_a_redis_password_the_urls_are_kept() -> None:
    env = {"REDIS_URL": "redis://:inline@redis:6379/0", "REDIS_CLUSTER_URLS": "redis://r1:6379"}
    config = StarlingConfig.from_env(env)
    assert config.redis_url == "redis://:inline@redis:6379/0"
    assert config.redis_cluster_urls == ("redis://r1:6379",)
    assert StarlingConfig.from_env({}).redis_url == "redis://127.0.0.1:6379/0"


def test_a_url_with_a_password_of_its_own_and_redis_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="REDIS_URL has a password and so does REDIS_PASSWORD"):
        StarlingConfig.from_env(
            {"REDIS_URL": "redis://:inline@redis:6379/0", "REDIS_PASSWORD": "x"}
        )
    with pytest.raises(ConfigError, match="REDIS_CLUSTER_URLS has a password"):
        with_password("redis://u:p@r1:6379", "x", "REDIS_CLUSTER_URLS")


# --- DATABASE_PASSWORD and the Django settings --------------------------------------------


def run_settings(
    monkeypatch: pytest.MonkeyPatch, module: str = "feed.settings", **env: str | None
) -> dict[str, Any]:
    values: dict[str, str | None] = {
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_ALLOWED_HOSTS": "starling.example.com",
        "DATABASE_URL": "postgres://starling@postgres:5432/starling",
        "DATABASE_PASSWORD": None,
        "DATABASE_PASSWORD_FILE": None,
        "REDIS_URL": "redis://redis:6379/0",
        "REDIS_PASSWORD": None,
        "REDIS_PASSWORD_FILE": None,
        "CELERY_BROKER_URL": None,
        **env,
    }
    for name, value in values.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    if module == "feed.settings":
        # Run afresh (the test session has imported it already): its file, not the module.
        return runpy.run_path(str(ROOT / "feed" / "settings.py"))
    return runpy.run_module(module)


def test_the_database_password_joins_the_parsed_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = run_settings(monkeypatch, DATABASE_PASSWORD_FILE=secret_file(tmp_path, AWKWARD))
    database = settings["DATABASES"]["default"]
    assert (database["USER"], database["HOST"], database["NAME"]) == (
        "starling",
        "postgres",
        "starling",
    )
    assert database["PASSWORD"] == AWKWARD
    # Without it, the URL's own password (or none) as before.
    settings = run_settings(monkeypatch, DATABASE_URL="postgres://u:inline@db:5432/x")
    assert settings["DATABASES"]["default"]["PASSWORD"] == "inline"
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL has a password and so does"):
        run_settings(
            monkeypatch, DATABASE_URL="postgres://u:inline@db:5432/x", DATABASE_PASSWORD="x"
        )


def test_celery_follows_the_redis_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = run_settings(monkeypatch, REDIS_PASSWORD_FILE=secret_file(tmp_path, AWKWARD))
    assert kombu_parse_url(settings["CELERY_BROKER_URL"])["password"] == AWKWARD
    assert settings["CELERY_BROKER_URL"] == settings["STARLING"].redis_url


def test_the_secret_key_may_be_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = secrets.token_urlsafe(64)
    settings = run_settings(
        monkeypatch,
        "feed.settings_production",
        DJANGO_SECRET_KEY=None,
        DJANGO_SECRET_KEY_FILE=secret_file(tmp_path, key + "\n"),
    )
    assert settings["SECRET_KEY"] == key
    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY_FILE: cannot read"):
        run_settings(
            monkeypatch,
            "feed.settings_production",
            DJANGO_SECRET_KEY=None,
            DJANGO_SECRET_KEY_FILE=str(tmp_path / "missing"),
        )
    with pytest.raises(ImproperlyConfigured, match="or DJANGO_SECRET_KEY_FILE name a file"):
        run_settings(
            monkeypatch,
            "feed.settings_production",
            DJANGO_SECRET_KEY=None,
            DJANGO_SECRET_KEY_FILE=secret_file(tmp_path, "", "empty"),
        )
