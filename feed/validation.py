"""Pure input rules for users and tweets (no Django)."""

from __future__ import annotations

import re
import unicodedata

TWEET_MAX_CHARS = 280
USERNAME_RE = re.compile(r"^[A-Za-z0-9_]{1,30}$")
#: Control characters other than newline and tab have no place in a tweet.
_ALLOWED_CONTROLS = {"\n", "\t"}


class InvalidInput(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def normalize_tweet_text(text: str) -> str:
    """NFC-normalize ``text`` and check it is 1-280 characters and not blank.

    Characters are Unicode code points after NFC, so a precomposed and a
    decomposed "é" count the same. Surrogates (unpaired halves of UTF-16
    pairs, which JSON can smuggle in as ``\\ud800``) and control characters
    other than newline and tab are refused.
    """
    text = unicodedata.normalize("NFC", text)
    # Blank: nothing but whitespace and invisible format characters (zero-width
    # space and joiners, BOM, direction marks), which str.strip() keeps.
    if all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text):
        raise InvalidInput("text", "must not be blank (it has no visible character)")
    if len(text) > TWEET_MAX_CHARS:
        raise InvalidInput("text", f"must be at most {TWEET_MAX_CHARS} characters, got {len(text)}")
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cs":
            raise InvalidInput("text", "contains an unpaired surrogate (invalid Unicode)")
        if category == "Cc" and ch not in _ALLOWED_CONTROLS:
            raise InvalidInput("text", f"contains the control character U+{ord(ch):04X}")
    return text


def validate_username(username: str) -> str:
    if not USERNAME_RE.match(username):
        raise InvalidInput(
            "username", "must be 1-30 characters: letters, digits and underscores only"
        )
    return username


#: The digits a whole-number query parameter may hold (``str.isdigit`` also
#: takes "²" and other digits ``int`` refuses).
_WHOLE_NUMBER = re.compile(r"[0-9]{1,20}")


def whole_number(field: str, raw: str, *, low: int, high: int) -> int:
    """A query parameter's whole number, ASCII digits only, within bounds: the one
    way every numeric parameter of the API is read (the timeline's parser and
    the DRF views' query serializers)."""
    text = raw.strip()
    if not _WHOLE_NUMBER.fullmatch(text):
        raise InvalidInput(field, f"must be a whole number, got {text[:30]!r}")
    value = int(text)
    if not low <= value <= high:
        raise InvalidInput(field, f"must be between {low} and {high}, got {value}")
    return value
