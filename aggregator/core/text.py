"""Bounded quoting of user values in messages (pure).

Error messages, dead-letter reasons and log lines quote values from items and rule files. Those
values can be large (an item holds up to 400 KB), so a message must never repeat a whole value:
:func:`quote` keeps a short prefix and says how long the value was. This keeps dead letters far
below DynamoDB's 400 KB item limit and keeps logs free of whole attribute values.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_QUOTED_CHARS", "MAX_REASON_CHARS", "bound", "quote"]

MAX_QUOTED_CHARS = 40
"""Longest prefix of a value that a message quotes."""

MAX_REASON_CHARS = 1000
"""Longest reason text kept for a dead letter or a log line (a message of several parts)."""


def quote(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr`` of a value, or of a prefix of it when long.

    Examples
    --------
    >>> quote("abc")
    "'abc'"
    >>> quote("x" * 100, limit=5)
    "'xxxxx'… (100 chars)"
    >>> quote(b"\\x00" * 50, limit=2)
    "b'\\\\x00\\\\x00'… (50 bytes)"
    """
    if isinstance(value, str | bytes | bytearray):
        if len(value) <= limit:
            return repr(value)
        unit = "chars" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}… ({len(value)} {unit})"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({type(value).__name__}, {len(text)} chars as text)"


def bound(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` cut to ``limit`` characters (marked with ``…``), on one line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
