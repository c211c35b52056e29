"""A set of ids that stays small at Wikipedia scale: 5.9M KILT article ids in a few MB, not a few hundred.

KILT's ``wikipedia_id`` values are decimal numbers below ~70M, so numeric ids go into a bitmap (one bit per
possible id, grown as needed); any other id (text, or numbers too large for the bitmap) goes into a plain set.
"""

from __future__ import annotations

_MAX_BITMAP_ID = 1 << 31  # 256 MB of bitmap at most; larger numbers go to the set


class SeenIds:
    """``add(id) -> bool``: True the first time an id is seen, False for a repeat.

    Usage:
        >>> seen = SeenIds()
        >>> seen.add("12"), seen.add("12"), seen.add("abc")
        (True, False, True)
    """

    def __init__(self) -> None:
        self._bits = bytearray()
        self._other: set[str] = set()
        self.count = 0

    def add(self, value: str | int) -> bool:
        text = str(value)
        slot = _bitmap_slot(text)
        if slot is None:
            if text in self._other:
                return False
            self._other.add(text)
        else:
            byte, bit = slot
            if byte >= len(self._bits):
                # grow geometrically so a stream of rising ids costs amortised O(1)
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            if self._bits[byte] >> bit & 1:
                return False
            self._bits[byte] |= 1 << bit
        self.count += 1
        return True

    def __contains__(self, value: str | int) -> bool:
        text = str(value)
        slot = _bitmap_slot(text)
        if slot is None:
            return text in self._other
        byte, bit = slot
        return byte < len(self._bits) and bool(self._bits[byte] >> bit & 1)

    def __len__(self) -> int:
        return self.count


def _bitmap_slot(text: str) -> tuple[int, int] | None:
    """(byte, bit) of a canonical decimal id below the bitmap's bound; None for any other id ("007" is text)."""
    if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0"):
        return None
    number = int(text)
    return divmod(number, 8) if number < _MAX_BITMAP_ID else None
