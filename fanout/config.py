"""Settings shared by every Starling process, read from the environment.

Django, Celery and the Spark jobs all build a :class:`StarlingConfig` with
:meth:`StarlingConfig.from_env`, so one variable name means the same thing
everywhere (12-factor). Nothing here imports Django or Spark.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from fanout.model.join import SLACK
from fanout.store.keys import SLOTS, Shards

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_KAFKA = "127.0.0.1:9092"
#: Shards of the timeline store on a Redis Cluster (fanout.store.keys.Shards): each is
#: one hash slot, so this many slots carry data, spread evenly over the primaries.
DEFAULT_CLUSTER_SHARDS = 256
DEFAULT_TIMELINE_SIZE = 800
DEFAULT_TIMELINE_SLACK = SLACK
#: How long the changelogs keep a tombstone once compacted (Kafka's default is 24 h).
DEFAULT_TOMBSTONE_RETENTION_HOURS = 7 * 24
#: Partitions of each changelog. Two per topic keep both cores busy on the
#: embedded stack without paying for extra read tasks per micro-batch.
DEFAULT_PARTITIONS = 2
#: Changelog records per micro-batch at most: a job that restarts behind a
#: long backlog drains it in batches of bounded memory and duration.
DEFAULT_MAX_RECORDS_PER_TRIGGER = 20_000
DEFAULT_ACTIVE_DAYS = 30  # as Twitter: a month without a read or a sign-in
#: Followers from which an author is pulled at read time instead of pushed
#: (docs/decisions.md D18: a post then costs what 10,000 timeline writes cost,
#: about 40 ms of Redis, and a reader rarely follows more than a few such authors).
DEFAULT_PULL_THRESHOLD = 10_000
#: Records in a micro-batch from which the fanout job writes each timeline
#: from one task after a shuffle by owner (docs/decisions.md D25); a smaller
#: micro-batch is written where the join ran, saving the shuffle's stage. At
#: 1,000 tweets/s a micro-batch holds ~350.
DEFAULT_ROUTE_FROM = 1_000


#: What ``STARLING_LOG_LEVEL`` may say (every process: web, Celery, the fanout job).
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """A setting in the environment is missing or malformed; the message names it."""


class Env:
    """The one way Starling reads its environment: typed, bounded, and every
    error names the variable (Django's settings, Celery, the Spark jobs and
    :meth:`StarlingConfig.from_env` all read through it). An empty value
    counts as unset.

    Any variable may instead be given as a file: ``NAME_FILE`` names a file
    whose content (surrounding whitespace and the final newline stripped) is
    the value of ``NAME``, as with Docker's and Compose's secrets mounted in
    ``/run/secrets``. Setting both is refused, so a stale variable cannot
    hide a rotated file."""

    TRUE = frozenset({"1", "true", "yes", "on"})
    FALSE = frozenset({"0", "false", "no", "off"})
    #: The suffix of the variable naming a file that holds another's value.
    FILE_SUFFIX = "_FILE"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env

    def raw(self, name: str) -> str | None:
        value = _stripped(self.env.get(name))
        file_name = name + self.FILE_SUFFIX
        path = _stripped(self.env.get(file_name))
        if path is None:
            return value
        if value is not None:
            raise ConfigError(f"{name} and {file_name} are both set: set only one of them")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"{file_name}: cannot read {path}: {reason}") from None
        return _stripped(text)

    def text(self, name: str, default: str = "") -> str:
        raw = self.raw(name)
        return default if raw is None else raw

    def int(self, name: str, default: int, *, low: int, high: int) -> int:
        return int(_number(name, self.raw(name), default, int, "an integer", low, high))

    def float(self, name: str, default: float, *, low: float, high: float) -> float:
        return _number(name, self.raw(name), default, float, "a number", low, high)

    def bool(self, name: str, default: bool) -> bool:
        raw = self.raw(name)
        if raw is None:
            return default
        if raw.lower() in self.TRUE:
            return True
        if raw.lower() in self.FALSE:
            return False
        raise ConfigError(f"{name} must be true or false, got {raw!r}")

    def list(self, name: str, default: str = "") -> list[str]:
        """A comma-separated list."""
        return [item.strip() for item in self.text(name, default).split(",") if item.strip()]

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.text(name, default).lower()
        if value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return value


def _stripped(value: str | None) -> str | None:
    """``value`` without surrounding whitespace; ``None`` if that leaves nothing."""
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _number(
    name: str,
    raw: str | None,
    default: float,
    convert: Callable[[str], float],
    kind: str,
    low: float,
    high: float,
) -> float:
    """``raw`` (unset: ``default``) as a number within bounds, or an error naming ``name``."""
    if raw is None:
        return default
    try:
        value = convert(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {value:g}")
    return value


@dataclass(frozen=True)
class TopicNames:
    """The topics, named from ``STARLING_TOPIC_PREFIX``: the changelogs of
    the tables ``tweets`` (posts and reposts), ``follows`` and
    ``engagements`` (likes and reposts, by tweet), and ``timelines``
    (commands for the fanout job, see fanout.model.events)."""

    prefix: str = ""

    @property
    def tweets(self) -> str:
        return f"{self.prefix}tweets"

    @property
    def follows(self) -> str:
        return f"{self.prefix}follows"

    @property
    def engagements(self) -> str:
        return f"{self.prefix}engagements"

    @property
    def timelines(self) -> str:
        return f"{self.prefix}timelines"

    @property
    def filters(self) -> str:
        return f"{self.prefix}filters"

    def tables(self) -> tuple[str, str, str]:
        """The changelogs of the tables (what a rebuild reads)."""
        return (self.tweets, self.follows, self.engagements)

    def all(self) -> tuple[str, ...]:
        """Every topic the fanout job reads."""
        return (self.tweets, self.follows, self.engagements, self.timelines, self.filters)

    def physical(self, logical: str) -> str:
        """A logical name (``"tweets"``, ``"timelines"``, ...) → the topic's name."""
        return f"{self.prefix}{logical}"

    def logical(self, physical: str) -> str:
        """Map a physical topic name back to its logical name."""
        if physical in self.all():
            return physical[len(self.prefix) :]
        raise KeyError(physical)


def with_password(url: str, password: str | None, name: str) -> str:
    """``url`` with ``password`` in its user information (percent-encoded, a
    user name kept), for a password given apart from the URL (``REDIS_PASSWORD``);
    a URL that has a password of its own as well is refused, naming ``name``."""
    if password is None:
        return url
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if ":" in userinfo:
        raise ConfigError(f"{name} has a password and so does REDIS_PASSWORD: set only one")
    user = userinfo if at else ""
    netloc = f"{user}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


#: Kafka client settings read from the environment, with their librdkafka names:
#: every client (producer, admin, consumers, the Spark source) gets all of them.
KAFKA_CLIENT_ENV = {
    "KAFKA_SECURITY_PROTOCOL": "security.protocol",
    "KAFKA_SASL_MECHANISM": "sasl.mechanism",
    "KAFKA_SASL_USERNAME": "sasl.username",
    "KAFKA_SASL_PASSWORD": "sasl.password",
    "KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
    "KAFKA_SSL_CERTIFICATE_LOCATION": "ssl.certificate.location",
    "KAFKA_SSL_KEY_LOCATION": "ssl.key.location",
    "KAFKA_SSL_KEY_PASSWORD": "ssl.key.password",
    "KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "ssl.endpoint.identification.algorithm",
    "KAFKA_CLIENT_ID": "client.id",
}
#: A Kafka connection: librdkafka settings, ``bootstrap.servers`` first (hashable,
#: so a process can keep one client per connection).
KafkaClient = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class StarlingConfig:
    #: The single Redis: the timeline store unless a cluster is named below, and
    #: the default Celery broker (a broker cannot be a cluster). The URLs carry the
    #: password (``REDIS_PASSWORD`` is merged into them), so they are kept out of
    #: the configuration's repr, as the Kafka settings are.
    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    #: Redis Cluster nodes (any of them; the rest are found): the timeline store
    #: lives there instead of ``redis_url`` when given.
    redis_cluster_urls: tuple[str, ...] = field(default=(), repr=False)
    #: Shards of the timeline store's keys (0: one on a single Redis,
    #: DEFAULT_CLUSTER_SHARDS on a cluster). Changing it needs a rebuild.
    redis_shards: int = 0
    kafka_bootstrap_servers: str = DEFAULT_KAFKA
    #: Security and identity settings of every Kafka client (KAFKA_CLIENT_ENV); kept out
    #: of the configuration's repr, which logs and tracebacks may show (passwords).
    kafka_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    topics: TopicNames = field(default_factory=TopicNames)
    partitions: int = DEFAULT_PARTITIONS
    timeline_size: int = DEFAULT_TIMELINE_SIZE
    #: Entries kept beyond the cap before a trim (see fanout.model.join): memory vs. trim work.
    timeline_slack: int = DEFAULT_TIMELINE_SLACK
    spark_master: str = "local[2]"
    #: Fixed id-generator node number (0-31); ``None`` lets the process take one.
    node_id: int | None = None
    #: ``delete.retention.ms`` of the changelogs, in hours: a fanout job stopped
    #: longer than this may have missed deletes, and refuses to resume.
    tombstone_retention_hours: int = DEFAULT_TOMBSTONE_RETENTION_HOURS
    #: ``maxRecordsPerTrigger`` of the fanout job.
    #: Users who have not read their timeline or signed in for this many days are
    #: idle: their timelines are dropped and get no fan-out until they come back.
    active_days: int = DEFAULT_ACTIVE_DAYS
    #: Authors with this many followers or more are pulled (fanout.model.join); 0: none.
    pull_threshold: int = DEFAULT_PULL_THRESHOLD
    #: Micro-batches of this many records or more are written one task per timeline.
    route_from: int = DEFAULT_ROUTE_FROM

    @property
    def shards(self) -> Shards:
        """How the timeline store's keys are spread (fanout.store.keys.Shards)."""
        if self.redis_shards:
            return Shards(self.redis_shards)
        return Shards(DEFAULT_CLUSTER_SHARDS if self.redis_cluster_urls else 1)

    def kafka_client(self) -> KafkaClient:
        """The settings every Kafka client of this configuration is made with."""
        return (("bootstrap.servers", self.kafka_bootstrap_servers), *self.kafka_settings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StarlingConfig:
        read = Env(env)
        node = read.raw("STARLING_NODE_ID")
        redis_password = read.raw("REDIS_PASSWORD")
        return cls(
            redis_url=with_password(
                read.text("REDIS_URL", DEFAULT_REDIS_URL), redis_password, "REDIS_URL"
            ),
            redis_cluster_urls=tuple(
                with_password(url, redis_password, "REDIS_CLUSTER_URLS")
                for url in read.list("REDIS_CLUSTER_URLS")
            ),
            redis_shards=read.int("STARLING_REDIS_SHARDS", 0, low=0, high=SLOTS),
            kafka_bootstrap_servers=read.text("KAFKA_BOOTSTRAP_SERVERS", DEFAULT_KAFKA),
            kafka_settings=tuple(
                (setting, value)
                for name, setting in KAFKA_CLIENT_ENV.items()
                if (value := read.raw(name)) is not None
            ),
            topics=TopicNames(read.text("STARLING_TOPIC_PREFIX")),
            partitions=read.int("STARLING_PARTITIONS", DEFAULT_PARTITIONS, low=1, high=1024),
            timeline_size=read.int(
                "STARLING_TIMELINE_SIZE", DEFAULT_TIMELINE_SIZE, low=1, high=100_000
            ),
            timeline_slack=read.int(
                "STARLING_TIMELINE_SLACK", DEFAULT_TIMELINE_SLACK, low=1, high=100_000
            ),
            spark_master=read.text("SPARK_MASTER", "local[2]"),
            node_id=None if node is None else read.int("STARLING_NODE_ID", 0, low=0, high=31),
            tombstone_retention_hours=read.int(
                "STARLING_TOMBSTONE_RETENTION_HOURS",
                DEFAULT_TOMBSTONE_RETENTION_HOURS,
                low=1,
                high=100 * 365 * 24,
            ),
            active_days=read.int("STARLING_ACTIVE_DAYS", DEFAULT_ACTIVE_DAYS, low=1, high=36_500),
            pull_threshold=read.int(
                "STARLING_PULL_THRESHOLD", DEFAULT_PULL_THRESHOLD, low=0, high=1_000_000_000
            ),
        )
