"""An author's join state and how it is stored (pure: no I/O).

The fanout job keeps one per join key in Spark's state store
(spark/stream/operator.py): every follower and every live entry of the author
(its posts and its reposts), as packed 8-byte ids behind a small header, for
each repost its original and the original's author (24 bytes), the
followers who follow with reposts off, the user each entry's original
answers when that is someone else (16 bytes an entry: docs/decisions.md
D29), and the users each post notifies (those it mentions or answers: their
mentions timelines hold it). A follower who mutes the author is not
one here: the join treats the mute as an unfollow (docs/decisions.md D28). A
pulled author's follower ids (D18) are stored apart, in a value of their own.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterable

_STATE_VERSION = 6
#: version, n_followers, n_tweets, flags, n_reposts, n_quiet, n_answers, words of notified
_HEADER = struct.Struct("<BIIBIIII")
_HEADER_V5 = struct.Struct("<BIIBII")  # version 5 had no answers nor notified users
_HEADER_V4 = struct.Struct("<BIIBI")  # version 4 had no original authors nor quiet followers
_HEADER_V3 = struct.Struct("<BIIB")  # version 3 had no reposts
_HEADER_V2 = struct.Struct("<BII")  # version 2 had no flags (every author was pushed)
_HEADER_V1 = struct.Struct("<BqII")  # version 1 also had a horizon (no longer kept)

_PULLED = 1  # flags: the author is pulled
_APART = 2  # flags: the follower ids are kept in a value of their own (encode_split)


class AuthorState:
    """An author's join state: its followers and every live entry (``tweets``:
    its posts and reposts, ascending), with the original of each repost
    (``originals``: repost id → original id) and that original's author
    (``original_authors``: repost id → user id, 0 where unknown), the
    followers who follow with reposts off (``quiet``, a subset of the
    followers), the user each entry's original answers where that is not
    the original's author (``answers``: entry → user), and the users each
    post notifies (``notified``: post → user ids, ascending).

    The followers are decoded on first use and written back as they were
    read when unchanged; a pulled author's are stored apart
    (:meth:`encode_split`): its posts, the common case, need only the
    tweets, and a million followers are 8 MB to move, decode and sort.
    """

    __slots__ = (
        "_apart",
        "_count",
        "_followers",
        "_load",
        "answers",
        "notified",
        "original_authors",
        "originals",
        "pulled",
        "quiet",
        "tweets",
    )

    def __init__(
        self,
        followers: Iterable[int] = (),
        tweets: Iterable[int] = (),
        pulled: bool = False,
        *,
        load: Callable[[], bytes] | None = None,
        count: int = 0,
        originals: dict[int, int] | None = None,
        original_authors: dict[int, int] | None = None,
        quiet: Iterable[int] = (),
        answers: dict[int, int] | None = None,
        notified: dict[int, tuple[int, ...]] | None = None,
    ) -> None:
        self.tweets: list[int] = list(tweets)  # ascending
        #: The reposts among ``tweets``: repost id → the original's id.
        self.originals: dict[int, int] = originals or {}
        #: The reposts among ``tweets``: repost id → the original's author.
        self.original_authors: dict[int, int] = original_authors or {}
        #: Followers who do not receive the author's reposts.
        self.quiet: set[int] = set(quiet)
        #: Entries whose original answers someone other than its author: entry → that user.
        self.answers: dict[int, int] = answers or {}
        #: Posts that mention or answer other users: post → those users (their
        #: mentions timelines hold it), ascending.
        self.notified: dict[int, tuple[int, ...]] = notified or {}
        #: Followers read the author's list instead of receiving its tweets.
        self.pulled = pulled
        self._followers: set[int] | None = None if load is not None else set(followers)
        self._load = load  # the packed follower ids, until they are needed
        self._count = count
        self._apart = False  # read from a value of their own (encode_split)

    @property
    def followers(self) -> set[int]:
        if self._followers is None:
            assert self._load is not None
            numbers = array("q")
            numbers.frombytes(self._load())
            if len(numbers) != self._count:
                raise ValueError("author state's followers are truncated")
            self._followers, self._load = set(numbers), None
        return self._followers

    @property
    def follower_count(self) -> int:
        return self._count if self._followers is None else len(self._followers)

    @property
    def followers_loaded(self) -> bool:
        return self._followers is not None

    def _key(self) -> tuple[object, ...]:
        authors = {r: a for r, a in self.original_authors.items() if a}
        return (
            self.followers,
            self.tweets,
            self.pulled,
            self.originals,
            authors,
            self.quiet,
            self.answers,
            self.notified,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AuthorState):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        followers = sorted(self.followers) if self.followers_loaded else f"<{self._count} ids>"
        reposts = f", originals={self.originals}" if self.originals else ""
        if any(self.original_authors.values()):
            reposts += f", original_authors={self.original_authors}"
        quiet = f", quiet={sorted(self.quiet)}" if self.quiet else ""
        if self.answers:
            quiet += f", answers={self.answers}"
        if self.notified:
            quiet += f", notified={self.notified}"
        return (
            f"AuthorState(followers={followers}, tweets={self.tweets}, pulled={self.pulled}"
            f"{reposts}{quiet})"
        )

    def replaced(
        self,
        tweets: Iterable[int],
        pulled: bool,
        originals: dict[int, int] | None = None,
        original_authors: dict[int, int] | None = None,
        answers: dict[int, int] | None = None,
        notified: dict[int, tuple[int, ...]] | None = None,
    ) -> AuthorState:
        """The same followers (still undecoded if they were) with these entries."""
        out = AuthorState(
            tweets=tweets,
            pulled=pulled,
            originals=originals,
            original_authors=original_authors,
            quiet=self.quiet,
            answers=answers,
            notified=notified,
        )
        out._followers, out._load, out._count = self._followers, self._load, self._count
        out._apart = self._apart
        return out

    def encode(self) -> bytes:
        """The whole state as one value."""
        return self._pack(self._followers_packed(), _PULLED if self.pulled else 0)

    def encode_split(self) -> tuple[bytes, bytes | None]:
        """A pulled author's state without its follower ids, and the ids packed
        (None if they were read apart and not decoded since: unchanged); a
        pushed author's whole state, and None."""
        if not self.pulled:
            return self.encode(), None
        unchanged = self._apart and not self.followers_loaded
        packed = self._pack(b"", _PULLED | _APART, self.follower_count)
        return packed, None if unchanged else self._followers_packed()

    @staticmethod
    def apart(blob: bytes | None) -> bool:
        """Whether a value from :meth:`encode_split` left the follower ids out."""
        if not blob or blob[0] not in (3, 4, 5, _STATE_VERSION):
            return False
        return bool(blob[_HEADER_V3.size - 1] & _APART)

    def _followers_packed(self) -> bytes:
        """The follower ids, packed ascending (undecoded ones passed through)."""
        if self._followers is None:
            assert self._load is not None
            return self._load()
        return array("q", sorted(self._followers)).tobytes()

    def _originals_packed(self) -> bytes:
        """(repost, original, original's author) triples by repost id."""
        triples = array("q")
        authors = self.original_authors
        for repost in sorted(self.originals):
            triples.append(repost)
            triples.append(self.originals[repost])
            triples.append(authors.get(repost, 0))
        return triples.tobytes()

    def _answers_packed(self) -> tuple[bytes, bytes]:
        """(entry, user) pairs by entry, and the notified users as (post, n,
        n user ids) records by post."""
        pairs, notified = array("q"), array("q")
        for entry in sorted(self.answers):
            pairs.append(entry)
            pairs.append(self.answers[entry])
        for post in sorted(self.notified):
            users = self.notified[post]
            notified.append(post)
            notified.append(len(users))
            notified.extend(users)
        return pairs.tobytes(), notified.tobytes()

    def _pack(self, followers: bytes, flags: int, n_followers: int | None = None) -> bytes:
        tweets = array("q", self.tweets)
        quiet = array("q", sorted(self.quiet))
        answers, notified = self._answers_packed()
        header = _HEADER.pack(
            _STATE_VERSION,
            len(followers) // 8 if n_followers is None else n_followers,
            len(tweets),
            flags,
            len(self.originals),
            len(quiet),
            len(answers) // 16,
            len(notified) // 8,
        )
        return (
            header
            + followers
            + tweets.tobytes()
            + self._originals_packed()
            + quiet.tobytes()
            + answers
            + notified
        )

    @classmethod
    def decode(
        cls, blob: bytes | None, followers: Callable[[], bytes | None] | None = None
    ) -> AuthorState:
        """The state in ``blob`` (any version), its followers left undecoded;
        ``followers`` gives them (packed) when they were stored apart."""
        if not blob:
            return cls()
        version, flags, n_reposts, n_quiet, width = blob[0], 0, 0, 0, 2
        n_answers = n_notified = 0
        if version == _STATE_VERSION:
            _, n_followers, n_tweets, flags, n_reposts, n_quiet, n_answers, n_notified = (
                _HEADER.unpack_from(blob)
            )
            body, width = blob[_HEADER.size :], 3
        elif version == 5:
            _, n_followers, n_tweets, flags, n_reposts, n_quiet = _HEADER_V5.unpack_from(blob)
            body, width = blob[_HEADER_V5.size :], 3
        elif version == 4:
            _, n_followers, n_tweets, flags, n_reposts = _HEADER_V4.unpack_from(blob)
            body = blob[_HEADER_V4.size :]
        elif version == 3:
            _, n_followers, n_tweets, flags = _HEADER_V3.unpack_from(blob)
            body = blob[_HEADER_V3.size :]
        elif version == 2:
            _, n_followers, n_tweets = _HEADER_V2.unpack_from(blob)
            body = blob[_HEADER_V2.size :]
        elif version == 1:  # kept only the newest tweets: a rebuild restores the rest
            _, _, n_followers, n_tweets = _HEADER_V1.unpack_from(blob)
            body = blob[_HEADER_V1.size :]
        else:
            raise ValueError(f"unknown author-state version {version}")
        inline = 0 if flags & _APART else n_followers
        at = 8 * (inline + n_tweets)
        end = at + 8 * width * n_reposts
        quiet_end = end + 8 * n_quiet
        answers_end = quiet_end + 16 * n_answers
        if len(body) != answers_end + 8 * n_notified:
            raise ValueError("author state is truncated")
        tweets = array("q")
        tweets.frombytes(body[8 * inline : at])
        originals: dict[int, int] = {}
        original_authors: dict[int, int] = {}
        if n_reposts:
            records = array("q")
            records.frombytes(body[at:end])
            reposts = records[0::width]
            originals = dict(zip(reposts, records[1::width], strict=True))
            if width == 3:
                original_authors = dict(zip(reposts, records[2::width], strict=True))
        quiet = array("q")
        quiet.frombytes(body[end:quiet_end])
        answers, notified = _answers_of(body[quiet_end:answers_end], body[answers_end:])
        if flags & _APART:
            if followers is None:
                raise ValueError("the author state's followers are stored apart")
            load = followers
            state = cls(
                tweets=tweets,
                pulled=True,
                load=lambda: load() or b"",
                count=n_followers,
                originals=originals,
                original_authors=original_authors,
                quiet=quiet,
                answers=answers,
                notified=notified,
            )
            state._apart = True
            return state
        return cls(
            tweets=tweets,
            pulled=bool(flags & _PULLED),
            load=lambda: body[: 8 * n_followers],
            count=n_followers,
            originals=originals,
            original_authors=original_authors,
            quiet=quiet,
            answers=answers,
            notified=notified,
        )


def _answers_of(pairs: bytes, records: bytes) -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    """The answers and the notified users of a state's packed tail."""
    numbers = array("q")
    numbers.frombytes(pairs)
    answers = dict(zip(numbers[0::2], numbers[1::2], strict=True))
    words = array("q")
    words.frombytes(records)
    notified: dict[int, tuple[int, ...]] = {}
    at = 0
    while at < len(words):
        post, n = words[at], words[at + 1]
        notified[post] = tuple(words[at + 2 : at + 2 + n])
        at += 2 + n
    if at != len(words):
        raise ValueError("author state's notified users are truncated")
    return answers, notified
