"""Every Redis key Starling uses, named in one place.

| key | type | holds |
| --- | --- | --- |
| ``tl:<g>:<t><user>`` | string | a packed home timeline of generation ``g`` |
| ``tr:<g>:<t><user>`` | string | the timeline's reposts: (original, entry) pairs, packed |
| ``tw:<t><tweet>`` | string | a timeline entry's JSON body, shared by all generations |
| ``ct:<t><tweet>`` | string | a tweet's counts as JSON (likes, reposts, replies); none: all 0 |
| ``al:<g>:<t><author>`` | string | a pulled author's newest tweets, packed like a timeline |
| ``ar:<g>:<t><author>`` | string | that list's reposts, packed like a timeline's |
| ``pl:<g>:<t><user>`` | set | the pulled authors the user follows (merged into each read) |
| ``tx:<g>:<t><user>`` | string | the users the user hides (blocks both ways, mutes), packed |
| ``tf:<g>:<t><user>`` | string | the users the user follows, packed (what replies show) |
| ``ta:<g>:<t><user>`` | string | replies kept aside: (user answered, entry) records, packed |
| ``tc:<g>:<t><user>`` | string | replies shown as their user is followed: (user, entry), packed |
| ``ac:<g>:<t><author>`` | string | a pulled list's replies: (entry, user answered), packed |
| ``starling:generation`` | string | the active generation |
| ``starling:generation<t>`` | string | the active generation, as a shard's reads see it (cluster) |
| ``starling:generations`` | string | the last generation number handed out |
| ``starling:gen:<g>`` | hash | a generation's metadata; missing = Redis lost it |
| ``starling:gen:<g><t>`` | string | the generation is in this shard (cluster; missing = lost) |
| ``starling:wm:<g>`` | hash | the fanout watermark of a generation |
| ``starling:wm:<g><t>`` | hash | what a shard's reads need of the watermark (cluster) |
| ``starling:regen:<g>:<t><user>`` | string | a timeline being regenerated: cold until this seq |
| ``starling:refill<t>`` | set | users whose timeline is short and waits for a refill |
| ``starling:resets:<g><t>`` | sorted set | resets waiting for the watermark to reach their seq |
| ``starling:handover`` | string | a rebuilt generation waiting for the fanout job |
| ``starling:rebuild`` | hash | the last rebuild's state, stage and summary |
| ``starling:rebuild:log`` | list | the progress lines of a rebuild the fanout job runs |
| ``starling:rebuild:request`` | string | the running rebuild's request (expires unrenewed) |
| ``starling:rebuild:claim:<id>`` | string | who took that request: the job, or its command back |
| ``starling:fanout`` | string | the fanout job and the rebuild it runs (expires unrenewed) |
| ``starling:deadletters`` | hash | bad changelog records by ``topic/partition/offset`` |
| ``starling:tokens:<t><user>`` | string | the user's tokens issued before this time are refused |
| ``starling:seen:<t><user>`` | string | the day of the user's last read (written once a day) |
| ``starling:relay:*`` | various | the outbox relay's lock, flags, back-off, statistics |
| ``starling:ids:node`` | string | the id generators' node counter |
| ``starling:rl:{scope}:{who}`` | string | a rate-limit window's count |
| ``starling:metrics:db`` | hash | the database figures ``/metrics`` shows, refreshed by a task |

``<t>`` is the key's *shard tag* (:class:`Shards`): empty on a single Redis,
a Redis Cluster hash tag such as ``{3c}`` otherwise, so that every key a
script touches lies in one slot. A user's keys (timeline, pulled authors,
regeneration, tokens, activity) and a tweet's body are tagged by the
shard of their id; the shard's copies of what reads and writes need of
the global keys (the active generation, the generation's presence, the
watermark) carry the same tag. The global
keys stay where they are: the fanout job and the rebuild read them, not
the scripts.

The timeline store (:mod:`fanout.store.timelines`) owns the keys from ``tl:`` to
``starling:seen:``; the
relay coordinator (:mod:`feed.relay`), the id generator and the rate
limiter (``feed.idgen``, ``feed.ratelimit``) and the metrics (``feed.metrics``) the others.

The Lua scripts receive the prefixes they need as arguments (see
:data:`SCRIPT_PREFIXES`), so no key format is written twice.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from fanout.model import owners

TIMELINE_PREFIX = "tl:"
TWEET_PREFIX = "tw:"
REPOSTS_PREFIX = "tr:"
LIST_REPOSTS_PREFIX = "ar:"
COUNTS_PREFIX = "ct:"
LIST_PREFIX = "al:"
PULLS_PREFIX = "pl:"
FILTERS_PREFIX = "tx:"
FOLLOWEES_PREFIX = "tf:"
ASIDE_PREFIX = "ta:"
SHOWN_REPLIES_PREFIX = "tc:"
LIST_ANSWERS_PREFIX = "ac:"
ACTIVE_GENERATION = "starling:generation"
GENERATION_COUNTER = "starling:generations"
GENERATION_PREFIX = "starling:gen:"
WATERMARK_PREFIX = "starling:wm:"
REGENERATION_PREFIX = "starling:regen:"
HANDOVER = "starling:handover"
REBUILD_STATUS = "starling:rebuild"
#: The field of :data:`REBUILD_STATUS` the rebuild's read tasks add their records to.
REBUILD_RECORDS_READ = "records_read"
REBUILD_LOG = "starling:rebuild:log"
REBUILD_REQUEST = "starling:rebuild:request"
REBUILD_CLAIM_PREFIX = "starling:rebuild:claim:"
FANOUT_JOB = "starling:fanout"
#: One per running fanout job (its instance id), for as long as it announces itself.
FANOUT_INSTANCE_PREFIX = "starling:fanout:instance:"
DEAD_LETTERS = "starling:deadletters"
TOKENS_PREFIX = "starling:tokens:"
REFILL = "starling:refill"
RESETS_PREFIX = "starling:resets:"
SEEN_PREFIX = "starling:seen:"

RELAY_LOCK = "starling:relay:lock"
#: Set by every trigger (a commit, the beat sweep): outbox rows wait for a relay
#: run. It coalesces triggers twice: a commit queues a relay task only when it
#: sets the flag, and the relay holding the lock runs again while it is set.
RELAY_DIRTY = "starling:relay:dirty"
RELAY_BACKOFF = "starling:relay:backoff"
RELAY_FAILURES = "starling:relay:failures"
RELAY_STATS = "starling:relay:stats"
DB_GAUGES = "starling:metrics:db"

ID_NODE_COUNTER = "starling:ids:node"
RATE_LIMIT_PREFIX = "starling:rl:"


#: Redis Cluster's hash slots (CRC16 of the key's hash tag, modulo this).
SLOTS = 16384
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: ids spread evenly whatever their low bits
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Shards:
    """How keys are spread over ``count`` shards, each a hash tag (one slot).

    One shard (a single Redis) leaves every key untagged: the layout of a
    single Redis does not change. Shard ``i``'s tag is chosen to hash to
    slot ``i * SLOTS // count``, so the shards spread evenly over the slot
    ranges the cluster's primaries own. Changing ``count`` moves every key:
    a deployment changes it only with a rebuild.
    """

    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= SLOTS:
            raise ValueError(f"shard count must be 1-{SLOTS}, not {self.count}")

    def of(self, key_id: int) -> int:
        """The shard of a user's or tweet's id, or of a timeline owner's: a
        negative owner (a mentions timeline, a list) is in its user's shard."""
        if key_id < 0:
            key_id = owners.user_of(key_id)
        return ((key_id * _GOLDEN) & _MASK) * self.count >> 64

    def tag(self, shard: int) -> str:
        return _slot_tags(self.count)[shard] if self.count > 1 else ""

    def tag_of(self, key_id: int) -> str:
        return self.tag(self.of(key_id))

    def tags(self) -> tuple[str, ...]:
        return _slot_tags(self.count) if self.count > 1 else ("",)

    def group(self, key_ids: Iterable[int]) -> dict[str, list[int]]:
        """``key_ids`` by the tag of their shard, each group in their order."""
        out: dict[str, list[int]] = {}
        for i in key_ids:
            out.setdefault(self.tag_of(i), []).append(i)
        return out


@functools.cache
def _slot_tags(count: int) -> tuple[str, ...]:
    """For each shard, the shortest hash tag (``{hex}``) of its slot."""
    wanted = {i * SLOTS // count: i for i in range(count)}
    tags: list[str] = [""] * count
    left, n = len(wanted), 0
    while left:
        text = f"{n:x}"
        shard = wanted.get(slot(text))
        if shard is not None and not tags[shard]:
            tags[shard] = "{" + text + "}"
            left -= 1
        n += 1
    return tuple(tags)


def slot(key: str) -> int:
    """A key's Redis Cluster slot (CRC16-XMODEM of its hash tag)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key.encode(), 0) % SLOTS


def timeline_prefix(generation: int | str) -> str:
    return f"{TIMELINE_PREFIX}{generation}:"


def timeline(generation: int, user_id: int, tag: str = "") -> str:
    return f"{timeline_prefix(generation)}{tag}{user_id}"


def list_prefix(generation: int | str) -> str:
    return f"{LIST_PREFIX}{generation}:"


def author_list(generation: int, author_id: int, tag: str = "") -> str:
    return f"{list_prefix(generation)}{tag}{author_id}"


def pulls_prefix(generation: int | str) -> str:
    return f"{PULLS_PREFIX}{generation}:"


def pulls(generation: int, user_id: int, tag: str = "") -> str:
    return f"{pulls_prefix(generation)}{tag}{user_id}"


def filters_prefix(generation: int | str) -> str:
    return f"{FILTERS_PREFIX}{generation}:"


def filters(generation: int, user_id: int, tag: str = "") -> str:
    """The users whose reposted tweets ``user_id``'s home timeline hides
    (packed ids, ascending; no key: none). Beside the timeline, in its shard."""
    return f"{filters_prefix(generation)}{tag}{user_id}"


def followees(generation: int, user_id: int, tag: str = "") -> str:
    """Whom ``user_id`` follows (packed ids, ascending; no key: no one), kept
    for idle users too: which delivered replies show (docs/decisions.md D29)."""
    return f"{FOLLOWEES_PREFIX}{generation}:{tag}{user_id}"


def aside(generation: int, user_id: int, tag: str = "") -> str:
    """The replies beside ``user_id``'s timeline to users it does not follow:
    (user answered, entry) records, sorted (D29)."""
    return f"{ASIDE_PREFIX}{generation}:{tag}{user_id}"


def shown_replies(generation: int, user_id: int, tag: str = "") -> str:
    """The replies in ``user_id``'s timeline to other users it follows:
    (user answered, entry) records, sorted (D29)."""
    return f"{SHOWN_REPLIES_PREFIX}{generation}:{tag}{user_id}"


def list_answers(generation: int, author_id: int, tag: str = "") -> str:
    """A pulled author's list's entries whose original answers a user:
    (entry, user) records, by entry (D29)."""
    return f"{LIST_ANSWERS_PREFIX}{generation}:{tag}{author_id}"


def tweet(tweet_id: int, tag: str = "") -> str:
    return f"{TWEET_PREFIX}{tag}{tweet_id}"


def reposts_prefix(generation: int | str) -> str:
    return f"{REPOSTS_PREFIX}{generation}:"


def timeline_reposts(generation: int, user_id: int, tag: str = "") -> str:
    """The (original, entry) pairs beside a timeline (fanout/store/ops.py)."""
    return f"{reposts_prefix(generation)}{tag}{user_id}"


def list_reposts_prefix(generation: int | str) -> str:
    return f"{LIST_REPOSTS_PREFIX}{generation}:"


def list_reposts(generation: int, author_id: int, tag: str = "") -> str:
    """The (original, entry) pairs beside a pulled author's list."""
    return f"{list_reposts_prefix(generation)}{tag}{author_id}"


def counts(tweet_id: int, tag: str = "") -> str:
    """A tweet's counts: a JSON object's text, written by the fanout job."""
    return f"{COUNTS_PREFIX}{tag}{tweet_id}"


def active_generation(tag: str = "") -> str:
    """The active generation's pointer (a shard's copy, given its tag)."""
    return f"{ACTIVE_GENERATION}{tag}"


def generation(number: int, tag: str = "") -> str:
    """A generation's metadata hash, or (given a tag) its marker in that shard."""
    return f"{GENERATION_PREFIX}{number}{tag}"


def watermark(number: int, tag: str = "") -> str:
    return f"{WATERMARK_PREFIX}{number}{tag}"


def regeneration_prefix(generation: int | str) -> str:
    return f"{REGENERATION_PREFIX}{generation}:"


def regeneration(generation: int, user_id: int, tag: str = "") -> str:
    return f"{regeneration_prefix(generation)}{tag}{user_id}"


def refill(tag: str = "") -> str:
    return f"{REFILL}{tag}"


def resets(generation: int, tag: str = "") -> str:
    return f"{RESETS_PREFIX}{generation}{tag}"


def tokens(user_id: int, tag: str = "") -> str:
    return f"{TOKENS_PREFIX}{tag}{user_id}"


def seen(user_id: int, tag: str = "") -> str:
    return f"{SEEN_PREFIX}{tag}{user_id}"


def id_of(key: bytes | str) -> int:
    """The user, author or tweet id a key ends with (after its shard tag)."""
    text = key.decode() if isinstance(key, bytes) else key
    return int(text.rsplit(":", 1)[-1].rsplit("}", 1)[-1])


def rate_limit(scope: str, who: str) -> str:
    return f"{RATE_LIMIT_PREFIX}{scope}:{who}"


#: What the scripts get as their first arguments, in this order (then the
#: shard tag of the call): they build key names from these prefixes and never
#: spell one themselves.
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
    REPOSTS_PREFIX,
    LIST_REPOSTS_PREFIX,
    COUNTS_PREFIX,
    FILTERS_PREFIX,
    FOLLOWEES_PREFIX,
    ASIDE_PREFIX,
    SHOWN_REPLIES_PREFIX,
    LIST_ANSWERS_PREFIX,
)
