"""OpenAPI schema adjustments (drf-spectacular hooks).

Responses every operation can give, whatever the view: 401 (a malformed or
bad ``Authorization`` header is refused even on public reads), and for
writes 429 (rate limits) and 503 (database unavailable). Declaring them here
keeps the views' ``responses`` about their own outcomes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

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
