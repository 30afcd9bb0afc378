"""Log output for every Starling process: plain lines, or one JSON object per
line with ``STARLING_LOG_FORMAT=json`` (what a log pipeline parses without regexes).

A web request's id (:func:`request_scope`; the ``X-Request-ID`` header, or one
made up) goes into every record logged while it is handled, so one request's
lines can be found among many workers'.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

from fanout.config import Env

PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("plain", "json")
#: The id of the request being handled in this context (None outside requests).
REQUEST_ID: ContextVar[str | None] = ContextVar("starling_request_id", default=None)
#: A client's X-Request-ID is kept if it looks like an id; otherwise one is made.
_GOOD_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger,
    message, the request id when there is one, the exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            out["request_id"] = request_id
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


def log_format(env: Mapping[str, str] | None = None) -> str:
    """``STARLING_LOG_FORMAT`` (plain by default); anything else is refused by name."""
    return Env(env).choice("STARLING_LOG_FORMAT", "plain", FORMATS)


def formatter(env: Mapping[str, str] | None = None) -> logging.Formatter:
    return JsonFormatter() if log_format(env) == "json" else logging.Formatter(PLAIN)


def configure(level: str = "INFO") -> None:
    """The root logger of a process that is not Django (the fanout job)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


def request_id(given: str | None) -> str:
    """The client's id if it looks like one, else a new one."""
    if given and _GOOD_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


@contextlib.contextmanager
def request_scope(given: str | None) -> Iterator[str]:
    """Handle a request under an id (records logged meanwhile carry it)."""
    token = REQUEST_ID.set(request_id(given))
    try:
        yield REQUEST_ID.get() or ""
    finally:
        REQUEST_ID.reset(token)
