import unicodedata

import pytest

from feed.validation import InvalidInput, normalize_tweet_text, validate_username


def test_text_is_nfc_normalized() -> None:
    decomposed = "cafe\u0301"
    assert normalize_tweet_text(decomposed) == "caf\u00e9"


def test_280_characters_counted_after_nfc() -> None:
    # 280 "é" written decomposed are 560 code points but 280 characters after NFC.
    text = "e\u0301" * 280
    assert len(normalize_tweet_text(text)) == 280
    with pytest.raises(InvalidInput, match="at most 280 characters, got 281"):
        normalize_tweet_text("x" * 281)


def test_emoji_count_as_code_points() -> None:
    assert normalize_tweet_text("\U0001f600" * 280) == "\U0001f600" * 280


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", "\u3000"])
def test_blank_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="blank"):
        normalize_tweet_text(text)


@pytest.mark.parametrize("bad", ["\x00", "\x1b[31m", "\x7f", "\ud800"])
def test_control_characters_and_surrogates_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput) as info:
        normalize_tweet_text(f"hello {bad}")
    assert info.value.field == "text"


def test_newlines_and_tabs_are_kept() -> None:
    assert normalize_tweet_text("a\nb\tc") == "a\nb\tc"
    assert unicodedata.is_normalized("NFC", normalize_tweet_text("Ω"))


@pytest.mark.parametrize("name", ["alice", "Bob_99", "x", "a" * 30])
def test_good_usernames(name: str) -> None:
    assert validate_username(name) == name


@pytest.mark.parametrize("name", ["", "a" * 31, "has space", "dash-ed", "émile", "a.b"])
def test_bad_usernames(name: str) -> None:
    with pytest.raises(InvalidInput, match="letters, digits and underscores"):
        validate_username(name)
