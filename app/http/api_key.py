"""Comparing a presented API key with the configured one: bytes in one defined encoding, constant time.

HTTP header values are bytes; the configured key is text. The key is compared as its UTF-8 bytes with the
bytes the client sent (``secrets.compare_digest``), so a key with non-ASCII characters matches when sent
as UTF-8, the encoding every HTTP client uses for such text. (Before, the header was decoded as latin-1 and
re-encoded as UTF-8: such a key matched only when the client sent latin-1.)
"""

from __future__ import annotations

import secrets

from pydantic import SecretStr


def key_matches(presented: bytes, key: SecretStr) -> bool:
    """``presented`` (the Bearer credentials as sent) is ``key``, as UTF-8."""
    return secrets.compare_digest(presented, key.get_secret_value().encode("utf-8"))
