"""Every Redis key Starling uses, named in one place.

| key | type | holds |
| --- | --- | --- |
| ``tl:{g}:{user}`` | string | a packed home timeline of generation ``g`` |
| ``tw:{tweet}`` | string | a tweet's JSON body, shared by all generations |
| ``al:{g}:{author}`` | string | a pulled author's newest tweets, packed like a timeline |
| ``pl:{g}:{user}`` | set | the pulled authors the user follows (merged into each read) |
| ``starling:generation`` | string | the active generation |
| ``starling:generations`` | string | the last generation number handed out |
| ``starling:gen:{g}`` | hash | a generation's metadata; missing = Redis lost it |
| ``starling:wm:{g}`` | hash | the fanout watermark of a generation |
| ``starling:regen:{g}:{user}`` | string | a timeline being regenerated: cold until this seq |
| ``starling:refill`` | set | users whose timeline is short and waits for a refill |
| ``starling:resets:{g}`` | sorted set | resets waiting for the watermark to reach their seq |
| ``starling:handover`` | string | a rebuilt generation waiting for the fanout job |
| ``starling:rebuild`` | hash | the last rebuild's state, stage and summary |
| ``starling:deadletters`` | hash | bad changelog records by ``topic/partition/offset`` |
| ``starling:tokens:{user}`` | string | the user's tokens issued before this time are refused |
| ``starling:seen:{user}`` | string | the day of the user's last read (written once a day) |
| ``starling:relay:*`` | various | the outbox relay's lock, flags, back-off, statistics |
| ``starling:ids:node`` | string | the id generators' node counter |
| ``starling:rl:{scope}:{who}`` | string | a rate-limit window's count |
| ``starling:metrics:db`` | hash | the database figures ``/metrics`` shows, refreshed by a task |

The timeline store (:mod:`fanout.timelines`) owns the first sixteen; the
relay coordinator (:mod:`fanout.relay`), the id generator and the rate
limiter (``feed.idgen``, ``feed.ratelimit``) and the metrics (``feed.metrics``) the others.

The Lua scripts receive the prefixes they need as arguments (see
:data:`SCRIPT_PREFIXES`), so no key format is written twice.
"""

from __future__ import annotations

TIMELINE_PREFIX = "tl:"
TWEET_PREFIX = "tw:"
LIST_PREFIX = "al:"
PULLS_PREFIX = "pl:"
ACTIVE_GENERATION = "starling:generation"
GENERATION_COUNTER = "starling:generations"
GENERATION_PREFIX = "starling:gen:"
WATERMARK_PREFIX = "starling:wm:"
REGENERATION_PREFIX = "starling:regen:"
HANDOVER = "starling:handover"
REBUILD_STATUS = "starling:rebuild"
#: The field of :data:`REBUILD_STATUS` the rebuild's read tasks add their records to.
REBUILD_RECORDS_READ = "records_read"
DEAD_LETTERS = "starling:deadletters"
TOKENS_PREFIX = "starling:tokens:"
REFILL = "starling:refill"
RESETS_PREFIX = "starling:resets:"
SEEN_PREFIX = "starling:seen:"

RELAY_LOCK = "starling:relay:lock"
RELAY_DIRTY = "starling:relay:dirty"
RELAY_BACKOFF = "starling:relay:backoff"
RELAY_FAILURES = "starling:relay:failures"
RELAY_STATS = "starling:relay:stats"
DB_GAUGES = "starling:metrics:db"
#: Set while a relay task is queued and not yet started: triggers coalesce.
RELAY_QUEUED = "starling:relay:queued"

ID_NODE_COUNTER = "starling:ids:node"
RATE_LIMIT_PREFIX = "starling:rl:"


def timeline_prefix(generation: int | str) -> str:
    return f"{TIMELINE_PREFIX}{generation}:"


def timeline(generation: int, user_id: int) -> str:
    return f"{timeline_prefix(generation)}{user_id}"


def list_prefix(generation: int | str) -> str:
    return f"{LIST_PREFIX}{generation}:"


def author_list(generation: int, author_id: int) -> str:
    return f"{list_prefix(generation)}{author_id}"


def pulls_prefix(generation: int | str) -> str:
    return f"{PULLS_PREFIX}{generation}:"


def pulls(generation: int, user_id: int) -> str:
    return f"{pulls_prefix(generation)}{user_id}"


def tweet(tweet_id: int) -> str:
    return f"{TWEET_PREFIX}{tweet_id}"


def generation(number: int) -> str:
    return f"{GENERATION_PREFIX}{number}"


def watermark(number: int) -> str:
    return f"{WATERMARK_PREFIX}{number}"


def regeneration_prefix(generation: int | str) -> str:
    return f"{REGENERATION_PREFIX}{generation}:"


def regeneration(generation: int, user_id: int) -> str:
    return f"{regeneration_prefix(generation)}{user_id}"


def resets(generation: int) -> str:
    return f"{RESETS_PREFIX}{generation}"


def tokens(user_id: int) -> str:
    return f"{TOKENS_PREFIX}{user_id}"


def seen(user_id: int) -> str:
    return f"{SEEN_PREFIX}{user_id}"


def rate_limit(scope: str, who: str) -> str:
    return f"{RATE_LIMIT_PREFIX}{scope}:{who}"


#: What the scripts get as their first arguments, in this order: they build
#: key names from these prefixes and never spell one themselves.
SCRIPT_PREFIXES = (
    TIMELINE_PREFIX,
    TWEET_PREFIX,
    ACTIVE_GENERATION,
    GENERATION_PREFIX,
    WATERMARK_PREFIX,
    REGENERATION_PREFIX,
    TOKENS_PREFIX,
    REFILL,
    RESETS_PREFIX,
    SEEN_PREFIX,
    LIST_PREFIX,
    PULLS_PREFIX,
)
