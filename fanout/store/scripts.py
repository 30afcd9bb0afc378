"""The Lua scripts of ``fanout/store/lua/``, loaded as package data.

A script file may start from shared parts (``packed.lua``: the packed
timeline helpers; ``merged.lua``: a timeline merged with pulled authors'
lists; ``entries.lua``: a page's entries as tweet objects; ``prefixes.lua``: the key prefixes of
:data:`fanout.store.keys.SCRIPT_PREFIXES` and the shard tag, which every call then
passes first). A prefixed script declares one key, in the shard of its
call, so that a Redis Cluster routes it to the node serving that shard.
Redis reports errors by line of the text it ran; :func:`explain` maps such
a line back to the file and line it came from.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis

from fanout.store import keys

#: The shared parts each script is run with, in order.
PARTS: dict[str, tuple[str, ...]] = {
    "apply": ("prefixes", "packed"),
    "read_page": ("prefixes", "packed", "merged", "entries"),
    "drop_idle": ("prefixes", "packed"),
    "read_ids": ("prefixes", "packed", "merged"),
    "watermark": (),
    "rate_limit": (),
    "bodies": (),
    "copy_watermark": (),
    "compare_set": (),
    "rebuild_request": (),
}
_LINE = re.compile(r"user_script:(\d+)")


@dataclass(frozen=True)
class LuaSource:
    name: str
    text: str
    #: (file, number of lines) of each part, in the order they were joined.
    parts: tuple[tuple[str, int], ...]
    prefixed: bool

    def where(self, line: int) -> str:
        """``fanout/store/lua/<file>.lua:<line>`` for a line of the joined text."""
        for file, count in self.parts:
            if line <= count:
                return f"fanout/store/lua/{file}.lua:{line}"
            line -= count
        return f"{self.name} line {line}"


@functools.cache
def source(name: str) -> LuaSource:
    """The text Redis runs for script ``name``: its parts, then the script."""
    files = (*PARTS[name], name)
    texts = [resources.files("fanout.store").joinpath("lua", f"{f}.lua").read_text() for f in files]
    texts = [t if t.endswith("\n") else t + "\n" for t in texts]
    return LuaSource(
        name=name,
        text="".join(texts),
        parts=tuple((f, t.count("\n")) for f, t in zip(files, texts, strict=True)),
        prefixed="prefixes" in PARTS[name],
    )


def explain(exc: redis.ResponseError, name: str) -> redis.ResponseError:
    """``exc`` with the script's line numbers mapped back to the Lua files."""
    where = source(name)
    message = _LINE.sub(lambda m: where.where(int(m.group(1))), str(exc))
    return type(exc)(message)


class Script:
    """A script registered on a client; callable like redis-py's ``Script``
    (``keys``, ``args``, ``client`` for a pipeline), with the key prefixes
    passed first for scripts that use them."""

    def __init__(self, client: Any, name: str) -> None:  # a Redis or a RedisCluster
        self.name = name
        self.source = source(name)
        self._script = client.register_script(self.source.text)
        self.sha = self._script.sha

    def arguments(self, args: list[Any] | tuple[Any, ...] = (), tag: str = "") -> list[Any]:
        return [*keys.SCRIPT_PREFIXES, tag, *args] if self.source.prefixed else list(args)

    @staticmethod
    def route(tag: str) -> str:
        """The key a prefixed script declares: one in the shard its call touches
        (what a cluster routes the call by)."""
        return keys.active_generation(tag)

    def __call__(
        self,
        keys: list[str] | tuple[str, ...] = (),
        args: list[Any] | tuple[Any, ...] = (),
        client: Any = None,
        tag: str = "",
    ) -> Any:
        """Run the script; a prefixed one touches the keys of shard ``tag``."""
        declared = list(keys) if keys or not self.source.prefixed else [self.route(tag)]
        arguments = self.arguments(args, tag)
        if isinstance(client, redis.client.Pipeline):
            # Straight EVALSHA: redis-py's own way asks SCRIPT EXISTS before every
            # pipeline (a round trip). A reply NOSCRIPT (a restarted or promoted
            # node) is sent again alone by fanout.store.redis_conn.run, which loads it.
            return client.evalsha(self.sha, len(declared), *declared, *arguments)
        try:
            return self._script(keys=declared, args=arguments, client=client)
        except redis.ResponseError as exc:
            raise explain(exc, self.name) from None
