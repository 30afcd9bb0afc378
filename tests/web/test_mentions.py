"""Reading mentions from a tweet's text (feed.mentions): pure, no database."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feed.mentions import MAX_MENTIONS, mentioned_names
from feed.validation import USERNAME_RE


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("hi @ann", ["ann"]),
        ("@ann hi", ["ann"]),
        ("@ann", ["ann"]),
        # Punctuation around a mention is no part of it.
        (
            "(@ann), @bob. @cat! @dee? @eve's @fay: @gus;",
            ["ann", "bob", "cat", "dee", "eve", "fay", "gus"],
        ),
        ('"@ann" [@bob] {@cat} @dee/@eve', ["ann", "bob", "cat", "dee", "eve"]),
        ("line\n@ann\t@bob", ["ann", "bob"]),
        ("#@ann -@bob", ["ann", "bob"]),
        # Digits and underscores are name characters.
        ("@a_1 @_x @9", ["a_1", "_x", "9"]),
        # Case: one user, named as the lookups do (lowercase), first spelling's place.
        ("@Ann @ANN @ann", ["ann"]),
        ("@bob @Ann @BOB", ["bob", "ann"]),
        # Addresses and glued names are no mentions.
        ("x@y", []),
        ("mail ann@example.com", []),
        ("@a@b", []),
        ("@ann@example.com", []),
        ("@@ann", []),
        ("é@ann", []),
        ("@annö", []),
        ("@", []),
        ("@ @!", []),
        ("@-ann", []),
        # A name longer than a username can be is no mention (nor its first 30).
        ("@" + "a" * 30, ["a" * 30]),
        ("@" + "a" * 31, []),
        # Fullwidth at sign: not a mention sign.
        ("\uff20ann", []),
    ],
)
def test_mentions_are_names_standing_on_their_own(text: str, names: list[str]) -> None:
    assert mentioned_names(text) == names


def test_every_mention_is_kept_in_order_the_caller_applies_the_limit() -> None:
    text = " ".join(f"@u{i}" for i in range(MAX_MENTIONS + 5))
    assert mentioned_names(text) == [f"u{i}" for i in range(MAX_MENTIONS + 5)]
    assert MAX_MENTIONS == 10


@given(st.text(max_size=300))
def test_whatever_the_text_every_name_is_a_valid_lowercased_username_once(text: str) -> None:
    names = mentioned_names(text)
    assert len(names) == len(set(names))
    for name in names:
        assert USERNAME_RE.match(name) and name == name.lower()
        assert re.search(rf"(?i)@{name}", text)


@given(
    st.from_regex(USERNAME_RE, fullmatch=True), st.sampled_from([" ", ",", ".", "!", ")", "\n", ""])
)
def test_any_registrable_username_can_be_mentioned(name: str, after: str) -> None:
    assert mentioned_names(f"hey @{name}{after}") == [name.lower()]
