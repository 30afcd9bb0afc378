"""Log lines: plain or JSON, with the request id of the request being handled."""

from __future__ import annotations

import logging

import orjson
import pytest

from fanout import logs


def record(message: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            import sys

            info = sys.exc_info()
    return logging.LogRecord("starling.test", logging.WARNING, __file__, 1, message, (), info)


def test_a_json_line_carries_the_request_id_only_inside_the_request() -> None:
    formatter = logs.JsonFormatter()
    with logs.request_scope("req-42") as rid:
        inside = orjson.loads(formatter.format(record("slow read")))
    outside = orjson.loads(formatter.format(record("sweep", exc=True)))
    assert rid == "req-42"
    assert inside["request_id"] == "req-42" and inside["message"] == "slow read"
    assert inside["level"] == "WARNING" and inside["logger"] == "starling.test"
    assert inside["time"].endswith("+00:00")
    assert "request_id" not in outside and "RuntimeError: boom" in outside["exception"]


def test_a_request_id_that_does_not_look_like_one_is_replaced() -> None:
    assert logs.request_id("abc.DEF_1:2-3") == "abc.DEF_1:2-3"
    for bad in (None, "", "x" * 65, "a b", "<script>", "id\nInjected: 1"):
        made = logs.request_id(bad)
        assert made != bad and len(made) == 32


def test_log_format_is_plain_or_json() -> None:
    assert logs.log_format({}) == "plain"
    assert isinstance(logs.formatter({"STARLING_LOG_FORMAT": "json"}), logs.JsonFormatter)
    with pytest.raises(ValueError, match="STARLING_LOG_FORMAT"):
        logs.log_format({"STARLING_LOG_FORMAT": "xml"})
