"""OpenAPI schema adjustments (drf-spectacular hooks).

``GET /api/v1/timeline`` and ``GET /api/v1/mentions`` are answered in front
of Django (feed.fastpath), so no view describes them: :func:`add_timelines`
writes their operations from the parameters the parser enforces
(feed.timeline.PARAMS).

Responses every operation can give, whatever the view: 401 (a malformed or
bad ``Authorization`` header is refused even on public reads), and for
writes 429 (rate limits) and 503 (database unavailable). Declaring them here
keeps the views' ``responses`` about their own outcomes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from feed import timeline

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
WRITES = {"post", "put", "patch", "delete"}
COMMON = {
    "401": "Missing, malformed, expired or revoked token.",
}
WRITE_ONLY = {
    "429": "Rate limit reached; see the Retry-After header.",
    "503": "The database is unavailable; try again after Retry-After.",
}


def add_common_responses(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            extra = COMMON | (WRITE_ONLY if method in WRITES else {})
            for code, description in extra.items():
                responses.setdefault(code, {"content": ERROR, "description": description})
    return result


def _param(p: timeline.Param) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": p.low, "maximum": p.high}
    if p.high > 2**31 - 1:
        schema["format"] = "int64"
    if p.default is not None:
        schema["default"] = p.default
    return {"in": "query", "name": p.name, "schema": schema, "description": p.help}


#: The timelines' operations: path, operation id, what it reads.
TIMELINES = (
    (
        "/api/v1/timeline",
        "v1_timeline_retrieve",
        "The signed-in user's home timeline, newest first",
    ),
    (
        "/api/v1/mentions",
        "v1_mentions_retrieve",
        "The signed-in user's mentions, newest first: the posts by others that mention "
        "them or answer one of their posts, but those of users they block, are blocked "
        "by or mute; read as the home timeline is (the same paging, min_seq and headers)",
    ),
    (
        "/api/v1/lists/{list_id}/timeline",
        "v1_lists_timeline_retrieve",
        "One of the signed-in user's lists, newest first: its members' posts and reposts "
        "(a reply to someone else only if they are a member), but what the user's blocks "
        "and mutes hide; read as the home timeline is (the same paging, min_seq and "
        "headers); 404 for a list that is not the user's or is no more",
    ),
)


def add_timelines(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """The timelines' operations, which no Django view declares."""
    result["components"]["schemas"]["Timeline"] = {
        "type": "object",
        "properties": {
            "tweets": {"type": "array", "items": {"$ref": "#/components/schemas/TweetOut"}},
            "next_max_id": {"type": "integer", "format": "int64", "nullable": True},
        },
        "required": ["tweets", "next_max_id"],
    }
    for path, operation, what in TIMELINES:
        result["paths"][path] = {
            "get": {
                "operationId": operation,
                "description": f"{what}; one Redis round trip and no SQL for a warm "
                "timeline. Headers: X-Starling-Source (redis|redis+database|database|"
                "fallback), X-Starling-Watermark, X-Starling-Fanout-Lag, "
                "X-Starling-Watermark-Age, X-Starling-Stale, X-Starling-Timeline-Version.",
                "parameters": [*_path_params(path), *(_param(p) for p in timeline.PARAMS)],
                "tags": ["v1"],
                "security": [{"bearerAuth": []}],
                "responses": {
                    "200": {
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/Timeline"}
                            }
                        },
                        "description": "A page of the timeline.",
                    },
                    "400": {"content": ERROR, "description": "A query parameter out of bounds."},
                    **(
                        {"404": {"content": ERROR, "description": "No such list of yours."}}
                        if "{list_id}" in path
                        else {}
                    ),
                },
            }
        }
    return result


def _path_params(path: str) -> list[dict[str, Any]]:
    """A list timeline's ``list_id``, as the other list paths declare it."""
    if "{list_id}" not in path:
        return []
    schema = {"type": "integer", "format": "int64"}
    return [{"in": "path", "name": "list_id", "schema": schema, "required": True}]


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <token>`` (feed.auth) in the schema; registered
    when this module is imported (feed.apis does)."""

    target_class = "feed.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from POST /api/v1/auth/register or /auth/token.",
        }
