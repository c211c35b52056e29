"""Whether a text holds anything a reader could read: white space alone, and characters that print nothing (a
zero-width space, a byte-order mark, a soft hyphen, a Hangul or Braille blank), make an empty passage."""

from __future__ import annotations

import unicodedata

# characters that are not white space to str.isspace() yet show nothing: fillers and blanks of other scripts
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f")


def is_blank(text: str) -> bool:
    """True when ``text`` shows nothing: it is empty, or every character is white space, a format or control
    character (Unicode categories Cf and Cc: U+200B zero-width space, U+200C/U+200D joiners, U+2060 word joiner,
    U+FEFF, U+00AD soft hyphen...), a variation selector or a blank filler (U+3164, U+2800...).

    :returns: whether the text would reach an index or a prompt as an empty passage.
    """
    for character in text:
        if character.isspace() or character in _INVISIBLE or "\ufe00" <= character <= "\ufe0f":
            continue
        if unicodedata.category(character) in ("Cf", "Cc"):
            continue
        return False
    return True


__all__ = ["is_blank"]
