"""Strings that end up in URL paths as ids and names, for the tests that go after every such id and name."""

from __future__ import annotations

# what attackers and unlucky users send: dot segments, separators (raw and pre-encoded), URL delimiters,
# control characters, backslashes, empty and over-long values, and ordinary odd-but-fine text
HOSTILE = [
    ".", "..", "...", "./a", "a/..", "/", "a/b", "%2F", "a%2Fb", "%2E%2E", "%2e", "?", "a?b=c", "#", "a#b",
    "&id=x", "%", "%%", "\x00", "\n", "a\tb", "\r\n", "\x7f", "\x85", "\u2028", "\\", "a\\b", "..\\..", "",
    " ", " a ", "+", ";", "~", "é", "🙂", "a b", "x" * 256, "x" * 257,
]  # fmt: skip
