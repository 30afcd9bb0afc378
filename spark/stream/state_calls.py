"""Many ``MapState`` calls in one round trip to Spark's state server.

PySpark's ``MapState.getValue`` and ``updateValue`` are one synchronous round
trip each: the Python worker writes a request to the task's state server (a
JVM thread), waits for its answer, and only then writes the next. On a busy
machine each wait is two wake-ups of two processes, and the join makes
about two such calls per active author (profiled: 63% of the operator's
worker samples, two thirds of it waiting in ``socket.readinto``).

The state server reads the requests of its socket one after the other and
answers each in order, so a batch of requests can be written at once and the
answers read back in the same order: the worker then waits once per window
instead of once per call. These functions do that with PySpark's own
message types and (de)serialisers, through its client's private attributes
(PySpark is pinned to 4.3 in ``pyproject.toml``); on a state object without
them (another PySpark, a test's stand-in) they fall back to the public
methods, one call each.

Why the window: while the server writes answers that the worker has not
read yet, it stops reading requests once the socket's buffer is full. A
window of gets is therefore bounded so that its requests (~60 bytes each)
always fit in the buffer; updates are answered with a few bytes each, so
their window only bounds how many answers wait to be read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.errors import PySparkRuntimeError
from pyspark.serializers import write_int

#: Requests written before their answers are read.
WINDOW = 256

Key = tuple[Any, ...]
Value = tuple[Any, ...]


def _client(state: Any) -> tuple[Any, Any] | None:
    """PySpark's map state client and its API client, when ``state`` has them."""
    client = getattr(state, "_mapStateClient", None)
    api = getattr(client, "_stateful_processor_api_client", None)
    if api is None or not hasattr(api, "sockfile") or not hasattr(client, "user_key_schema"):
        return None
    return client, api


def _request(name: str, **call: Any) -> bytes:
    import pyspark.sql.streaming.proto.StateMessage_pb2 as messages

    map_call = messages.MapStateCall(stateName=name, **call)
    variable = messages.StateVariableRequest(mapStateCall=map_call)
    return bytes(messages.StateRequest(stateVariableRequest=variable).SerializeToString())


def _exchange(api: Any, requests: Sequence[bytes], failure: str) -> list[bytes]:
    """Each request's answer (its value bytes), in order: the requests are
    written a window at a time, framed as the client frames one (version 0,
    length, message) and flushed once, then the window's answers are read."""
    answers: list[bytes] = []
    out = api.sockfile
    for start in range(0, len(requests), WINDOW):
        window = requests[start : start + WINDOW]
        for message in window:
            write_int(0, out)
            write_int(len(message), out)
            out.write(message)
        out.flush()
        for _ in window:
            status, error, value = api._receive_proto_message()
            if status != 0:
                raise PySparkRuntimeError(f"{failure}: {error}")
            answers.append(value)
    return answers


def get_values(state: Any, keys: Sequence[Key]) -> list[Value | None]:
    """``state.getValue(key)`` for every key, in order (None where absent)."""
    found = _client(state)
    if found is None:
        return [state.getValue(key) for key in keys]
    client, api = found
    import pyspark.sql.streaming.proto.StateMessage_pb2 as messages

    requests = [
        _request(
            state._stateName,
            getValue=messages.GetValue(userKey=api._serialize_to_bytes(client.user_key_schema, k)),
        )
        for k in keys
    ]
    answers = _exchange(api, requests, "Error getting value")
    return [api._deserialize_from_bytes(value) if value else None for value in answers]


def update_values(state: Any, items: Sequence[tuple[Key, Value]]) -> None:
    """``state.updateValue(key, value)`` for every pair, in order."""
    found = _client(state)
    if found is None:
        for key, value in items:
            state.updateValue(key, value)
        return
    client, api = found
    import pyspark.sql.streaming.proto.StateMessage_pb2 as messages

    requests = [
        _request(
            state._stateName,
            updateValue=messages.UpdateValue(
                userKey=api._serialize_to_bytes(client.user_key_schema, key),
                value=api._serialize_to_bytes(client.value_schema, value),
            ),
        )
        for key, value in items
    ]
    _exchange(api, requests, "Error updating map state value")
