"""Strings from outside, made safe to print: a bundle's pattern, entry names, paths inside it,
source excerpts, claims of who made it.

Owns: `printable(text, keep_newlines=False)`: every control character (C0, DEL, C1: ESC would
start a terminal escape sequence that can move the cursor, rewrite what is shown or set the
window title) and every bidirectional or invisible formatting character (U+202A..U+202E,
U+2066..U+2069, zero-width marks: text that reads other than it runs) is shown as its Python
escape, `\\x1b`, `\\u202e`; with `keep_newlines`, newlines and tabs stay (a source shown whole).
Must not: shorten, quote or otherwise change printable text.
"""

from __future__ import annotations

import re
import unicodedata

_KEEP = "\n\t"
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def printable(text: object, keep_newlines: bool = False) -> str:
    """`text` (str() of anything) with control and formatting characters escaped."""
    text = str(text)
    return _SUSPECT.sub(lambda m: _escape(m.group(), keep_newlines), text)


def _escape(char: str, keep_newlines: bool) -> str:
    if keep_newlines and char in _KEEP:
        return char
    if unicodedata.category(char) not in ("Cc", "Cf", "Zl", "Zp"):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
