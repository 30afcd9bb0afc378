"""The timeline store's bulk writes and reads by owner: what a rebuild writes
(timelines, lists and their reposts' pairs, the replies kept beside them,
pulled sets, owners' filters and followees, bodies, tombstones) and reads
back, pipelined per node, ``MSET`` per shard.

Part of :class:`fanout.store.timelines.TimelineStore`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from fanout.model.engagements import Counts, counts_json
from fanout.store import keys
from fanout.store.ops import (
    HEADER,
    IDLE,
    by_entry,
    entries_in,
    pack_ids,
    pack_pairs,
    pack_view,
)
from fanout.store.redis_conn import Client, Command, command, run


class TimelineBulk:
    """Bulk writes and reads of the timeline store (mixed into it)."""

    redis: Client
    shards: keys.Shards
    one_shard: bool

    def write_timelines(self, generation: int, timelines: Iterable[tuple[int, bytes]]) -> int:
        """Set packed timelines (a rebuild's output), pipelined; returns how many.
        With reposts, a timeline holds its winners only: :func:`fanout.store.ops.pack_view`
        packs a timeline and its pairs from its raw entries, and
        :meth:`write_timeline_reposts` writes the pairs."""
        tag = self.shards.tag_of
        return self._set_many((keys.timeline(generation, o, tag(o)), p) for o, p in timelines)

    def write_timeline_reposts(self, generation: int, pairs: Iterable[tuple[int, bytes]]) -> int:
        """Set timelines' packed pairs (``tr:``; :func:`fanout.store.ops.pack_view`),
        leaving out empty ones (no reposts in scope: no key); returns how many
        were written."""
        tag = self.shards.tag_of
        return self._set_many(
            (keys.timeline_reposts(generation, o, tag(o)), p) for o, p in pairs if p
        )

    def write_lists(self, generation: int, lists: Iterable[tuple[int, bytes]]) -> int:
        """Set pulled authors' packed lists (a rebuild's output); returns how many."""
        tag = self.shards.tag_of
        return self._set_many((keys.author_list(generation, a, tag(a)), p) for a, p in lists)

    def write_list_reposts(self, generation: int, pairs: Iterable[tuple[int, bytes]]) -> int:
        """Set pulled authors' lists' packed pairs (``ar:``), as
        :meth:`write_timeline_reposts` does for timelines."""
        tag = self.shards.tag_of
        return self._set_many((keys.list_reposts(generation, a, tag(a)), p) for a, p in pairs if p)

    def write_views(
        self, generation: int, views: Iterable[tuple[int, int, Mapping[int, int]]]
    ) -> int:
        """Set timelines from their raw entries: (owner, horizon, entry -> original
        of every entry at or above the horizon; a post's original is itself),
        each packed with :func:`fanout.store.ops.pack_view` into its winners and
        its pairs; returns how many timelines."""
        return self._write_views(
            ((owner, horizon, raw, None) for owner, horizon, raw in views),
            functools.partial(self.write_timelines, generation),
            functools.partial(self.write_timeline_reposts, generation),
        )

    def write_list_views(
        self,
        generation: int,
        views: Iterable[tuple[int, int, Mapping[int, int], Mapping[int, int]]],
    ) -> int:
        """Set pulled authors' lists from their raw entries, as :meth:`write_views`,
        and each repost's original's author (entry -> user), which a list's
        pairs carry."""
        return self._write_views(
            views,
            functools.partial(self.write_lists, generation),
            functools.partial(self.write_list_reposts, generation),
        )

    @staticmethod
    def _write_views(
        views: Iterable[tuple[int, int, Mapping[int, int], Mapping[int, int] | None]],
        write_packed: Callable[[Iterable[tuple[int, bytes]]], int],
        write_pairs: Callable[[Iterable[tuple[int, bytes]]], int],
    ) -> int:
        """Pack each (key id, horizon, raw entries, originals' authors or None)
        into its winners and pairs, write the pairs (none: no key), then the
        packed strings; returns how many."""
        packed: list[tuple[int, bytes]] = []
        pairs: list[tuple[int, bytes]] = []
        for key_id, horizon, raw, by in views:
            winners, aside = pack_view(horizon, raw, by=by)
            packed.append((key_id, winners))
            pairs.append((key_id, aside))
        write_pairs(pairs)
        return write_packed(packed)

    def write_pulls(
        self, generation: int, pulls: Iterable[tuple[int, Sequence[int], Collection[int]]]
    ) -> int:
        """Set each owner's pulled authors (a rebuild's output) in a generation
        being built, 2,000 owners per round trip; returns how many owners. Each
        is (owner, its pulled authors, those of them it follows with reposts
        off): those are the members ``-author`` (its reads leave the list's
        reposts out, fanout/store/lua/merged.lua). The sets are new (a
        generation's number is never used twice), and a task run again adds
        the same authors: a ``SADD`` alone sets them."""
        n = 0
        commands: list[Command] = []
        for owner, authors, quiet in pulls:
            key = keys.pulls(generation, owner, self.shards.tag_of(owner))
            members = [f"-{a}" if a in quiet else a for a in authors]
            commands.append(command("SADD", key, *members))
            n += 1
            if len(commands) >= 2000:
                run(self.redis, commands, per_trip=2000)
                commands.clear()
        run(self.redis, commands, per_trip=2000)
        return n

    def write_filters(self, generation: int, filters: Iterable[tuple[int, Sequence[int]]]) -> int:
        """Set owners' filters (``tx:``: their hidden users, packed ascending) in
        a generation being built, leaving out empty ones (no key); returns how
        many were written."""
        tag = self.shards.tag_of
        return self._set_many(
            (keys.filters(generation, o, tag(o)), pack_ids(sorted(set(hidden))))
            for o, hidden in filters
            if hidden
        )

    def write_followees(
        self, generation: int, followees: Iterable[tuple[int, Sequence[int]]]
    ) -> int:
        """Set owners' followees (``tf:``: whom each follows, packed ascending;
        docs/decisions.md D29) in a generation being built, leaving out empty
        ones (no key); returns how many were written."""
        tag = self.shards.tag_of
        return self._set_many(
            (keys.followees(generation, o, tag(o)), pack_ids(sorted(set(users))))
            for o, users in followees
            if users
        )

    def write_replies(
        self,
        generation: int,
        replies: Iterable[tuple[int, Sequence[tuple[int, int]], Sequence[tuple[int, int]]]],
    ) -> int:
        """Set the replies beside owners' timelines in a generation being built:
        (owner, aside, shown), each a list of (user answered, entry) records
        (``ta:`` and ``tc:``, docs/decisions.md D29), packed in entry order,
        leaving out empty ones (no key); returns how many keys were written."""
        tag = self.shards.tag_of

        def items() -> Iterable[tuple[str, bytes]]:
            for o, aside, shown in replies:
                if aside:
                    yield keys.aside(generation, o, tag(o)), pack_pairs(by_entry(aside))
                if shown:
                    yield keys.shown_replies(generation, o, tag(o)), pack_pairs(by_entry(shown))

        return self._set_many(items())

    def write_list_answers(
        self, generation: int, answers: Iterable[tuple[int, Sequence[tuple[int, int]]]]
    ) -> int:
        """Set pulled authors' lists' answers (``ac:``: (entry, user answered)
        records of the entries whose original answers a user, packed by entry)
        in a generation being built, leaving out empty ones (no key); returns
        how many were written."""
        tag = self.shards.tag_of
        return self._set_many(
            (keys.list_answers(generation, a, tag(a)), pack_pairs(sorted(records)))
            for a, records in answers
            if records
        )

    def with_replies(self, generation: int, owners: Sequence[int]) -> set[int]:
        """Those of ``owners`` whose views in ``generation`` may hold fewer
        than ``cap`` entries above their floor for replies (docs/decisions.md
        D29), reads going on into the database: their timelines keep replies
        aside (``ta:``), which the cap counts, or they read a pulled author's
        list that holds replies (``ac:``), of which a read leaves out those to
        users the reader does not follow. Pipelined: two commands per owner,
        and one per pulled author they read."""
        tag = self.shards.tag_of
        commands: list[Command] = []
        for o in owners:
            commands.append(command("EXISTS", keys.aside(generation, o, tag(o))))
            commands.append(command("SMEMBERS", keys.pulls(generation, o, tag(o))))
        replies = run(self.redis, commands)
        out: set[int] = set()
        reading: dict[int, set[int]] = {}
        for o, aside, pulls in zip(owners, replies[::2], replies[1::2], strict=True):
            if int(aside):
                out.add(o)
            elif pulls:
                reading[o] = {int(bytes(m).lstrip(b"-")) for m in pulls}
        authors = sorted(set().union(*reading.values()))
        if authors:
            found = run(
                self.redis,
                [command("EXISTS", keys.list_answers(generation, a, tag(a))) for a in authors],
            )
            answered = {a for a, n in zip(authors, found, strict=True) if int(n)}
            out |= {o for o, pulled in reading.items() if pulled & answered}
        return out

    def write_bodies(self, bodies: Iterable[tuple[int, bytes]]) -> int:
        """Put tweet bodies in the cache. A body never changes, and the fanout
        job writes the same bytes (``events.tweet_json``), so overwriting one
        that is there changes nothing."""
        return self._set_many((keys.tweet(t, self.shards.tag_of(t)), b) for t, b in bodies)

    def write_counts(self, counts: Mapping[int, Counts]) -> int:
        """Set tweets' counts (``ct:``, shared by all generations, like bodies):
        a rebuild's, computed from the changelog at its snapshot. The fanout
        job rewrites a tweet's at its next like, repost or reply, so counts that moved
        since the snapshot are right again once it has caught up."""
        return self._set_many(
            (keys.counts(t, self.shards.tag_of(t)), counts_json(*counted))
            for t, counted in counts.items()
            if any(counted)
        )

    def _set_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        """SET each key, 1,000 per ``MSET`` (per shard); returns how many. One
        command per thousand keys costs the client a fifth of what a pipeline
        of single SETs does (measured: ~850,000 against ~165,000 keys/s)."""
        n = 0
        per_shard: dict[int, list[str | bytes]] = {}
        pending = 0
        for key, value in items:
            chunk = per_shard.setdefault(keys.slot(key) if not self.one_shard else 0, [])
            chunk += (key, value)
            n += 1
            pending += 1
            if pending >= 16_000:
                self._mset(per_shard)
                per_shard.clear()
                pending = 0
        self._mset(per_shard)
        return n

    def _mset(self, per_shard: Mapping[int, list[str | bytes]]) -> None:
        commands: list[Command] = []
        for chunk in per_shard.values():
            for start in range(0, len(chunk), 2000):
                pairs = chunk[start : start + 2000]
                commands.append(command("MSET", str(pairs[0]), *pairs[1:]))
        run(self.redis, commands, per_trip=16)

    def timeline_lengths(self, generation: int, owners: Sequence[int]) -> list[int | None]:
        """How many ids each of ``owners``' timelines holds, from its size alone
        (``STRLEN``, pipelined: no timeline travels): None where there is none,
        -1 where it was dropped (an idle user's tombstone)."""
        sizes = self._per_timeline(generation, owners, "STRLEN")
        return [None if not n else -1 if n < HEADER.size else entries_in(n) for n in sizes]

    def _per_timeline(self, generation: int, owners: Sequence[int], name: str) -> list[Any]:
        """Command ``name`` on each of the owners' timeline keys, 1,000 per round trip."""
        tag = self.shards.tag_of
        names = [keys.timeline(generation, o, tag(o)) for o in owners]
        return run(self.redis, [command(name, k) for k in names])

    def dropped(self, generation: int, owners: Sequence[int]) -> set[int]:
        """Those of ``owners`` whose timeline was dropped (idle users), pipelined."""
        lengths = self.timeline_lengths(generation, owners)
        return {o for o, n in zip(owners, lengths, strict=True) if n == -1}

    def write_dropped(self, generation: int, owners: Iterable[int]) -> int:
        """Write dropped timelines (tombstones), as a rebuild keeps idle users idle."""
        tag = self.shards.tag_of
        return self._set_many((keys.timeline(generation, o, tag(o)), IDLE) for o in owners)
