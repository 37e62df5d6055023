"""The one rule for a name or id that ends up as one URL path segment (``/galleries/NAME/items/ID``,
``/models/NAME/reload``): what a client can always address, percent-encoded, without the URL changing.

Refused: ``.`` and ``..`` (clients and proxies resolve them as dot segments: ``/items/..`` becomes the
gallery itself), ``/`` (a separator even when sent as ``%2F``: servers decode it before routing), ``\\``
(WHATWG URL parsers read it as ``/``), and control characters (stripped or refused by URL parsers, and
unprintable in logs). Everything else, ``?``, ``#``, ``%``, spaces and any other Unicode included, round-trips
when percent-encoded (``urllib.parse.quote(s, safe="")``).
"""

from __future__ import annotations

import unicodedata

SEGMENT_RULE = "not '.' or '..', and without '/', '\\' or control characters"


def segment_fault(text: str) -> str | None:
    """Why ``text`` cannot be one URL path segment, or None when it can (empty text is the caller's rule)."""
    if text in (".", ".."):
        return f"{text!r} is a dot segment (clients resolve it away)"
    for ch in text:
        if ch in "/\\":
            return f"it contains {ch!r} (a path separator)"
        if unicodedata.category(ch) == "Cc":
            return f"it contains the control character {ch!r}"
    return None
