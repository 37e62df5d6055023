"""The root of lnserve's error tree: every layer raises these or their subclasses, and each carries the
stable ``code`` that HTTP answers and CLI messages show."""

from __future__ import annotations

from typing import ClassVar


class LnserveError(Exception):
    """Root of every lnserve error."""

    code: ClassVar[str] = "internal_error"
    exit_code: ClassVar[int] = 1


class StorageFullError(LnserveError):
    """A write ran out of space (disk, quota or the process's file-size limit). Not the caller's input and not
    a bug: the write was abandoned, nothing acknowledged before it is lost; free space and retry."""

    code = "storage_full"


class UserInputError(LnserveError):
    """The caller's input is at fault, not lnserve."""

    code = "invalid_input"
    exit_code = 2


def shown(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``...), so that a name taken from
    a hostile file cannot drive the terminal it is printed on; printable Unicode stays as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
