"""Mentions in a tweet's text (pure: no Django).

A mention is ``@`` and a name a user could have registered
(:data:`feed.validation.USERNAME_RE`: 1-30 ASCII letters, digits and
underscores), standing on its own:

* not glued to a word before it: ``x@ann`` (an address) and the second name
  of ``@a@b`` are no mentions; nor is ``@@ann``;
* not running on into more of a word: ``@ann@b`` (an address again),
  ``@annö`` and a name longer than 30 characters are no mentions;
* punctuation around it is fine: ``(@ann)``, ``@ann,`` and ``@ann's`` all
  mention ``ann``.

Names are matched as usernames are everywhere (sign-in, profiles): without
regard to case, so ``@Ann`` and ``@ANN`` are one mention of ``ann``. The text
is read once, when the tweet is written: :func:`mentioned_names` gives the
names in the order they first appear; the write keeps the first
:data:`MAX_MENTIONS` of them that name active users (feed.conversations).
"""

from __future__ import annotations

import re

#: The most users one tweet mentions (the first ones named in its text; any
#: further ``@name`` stays plain text).
MAX_MENTIONS = 10

#: What may not touch a mention: any letter or digit (of any script), ``_``
#: and ``@``.
_NAME = r"[A-Za-z0-9_]{1,30}"
_MENTION = re.compile(rf"(?<![\w@])@({_NAME})(?![\w@])")


def mentioned_names(text: str) -> list[str]:
    """The names ``text`` mentions, lowercased, each once, in the order they
    first appear (all of them: the caller keeps the first that exist)."""
    return list(dict.fromkeys(m.group(1).lower() for m in _MENTION.finditer(text)))
