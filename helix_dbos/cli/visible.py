"""Invisible characters made visible, so what a human approves is what they read.

A model (or a prompt injection steering it) can put bidi controls (U+202E turns
`invoice\u202efdp.exe` into `invoiceexe.pdf` on screen), zero-width and other
invisible or blank-looking characters into tool names and arguments. The CLI prints
each as an escape (`\\u202E`), highlighted on a terminal, as the inbox does.
"""

from __future__ import annotations

import re
import unicodedata

from rich.text import Text

# Only characters outside printable ASCII need a look.
_SUSPECT = re.compile(r"[^\x20-\x7e\n\t]")
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp", "Zs"})
# Default-ignorable or blank-looking characters of other categories.
_ALSO_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u2800\u3164\uffa0"
    "\ufe00\ufe01\ufe02\ufe03\ufe04\ufe05\ufe06\ufe07\ufe08\ufe09\ufe0a\ufe0b\ufe0c"
    "\ufe0d\ufe0e\ufe0f"
)
_ESCAPE = re.compile(r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}")
HIGHLIGHT = "bold reverse red"


def is_invisible(char: str) -> bool:
    if char in _ALSO_INVISIBLE:
        return True
    if "\U000e0000" <= char <= "\U000e0fff":  # tags and variation selectors supplement
        return True
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES


def escape_char(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def escape_invisible(text: str) -> str:
    """`text` with every invisible character as `\\uXXXX` (newlines and tabs stay)."""
    if not _SUSPECT.search(text):
        return text
    return _SUSPECT.sub(lambda m: escape_char(m[0]) if is_invisible(m[0]) else m[0], text)


def highlight(text: str) -> Text:
    """Rich text with each `\\uXXXX` escape highlighted (plain when piped: no colours)."""
    out = Text(text)
    for match in _ESCAPE.finditer(text):
        out.stylize(HIGHLIGHT, match.start(), match.end())
    return out


def reveal(text: str) -> Text:
    return highlight(escape_invisible(text))
