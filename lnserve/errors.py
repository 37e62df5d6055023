"""The root of lnserve's error tree: every layer raises these or their subclasses, and each carries the
stable ``code`` that HTTP answers and CLI messages show. Here too the errors of the environment any layer
may meet: a full disk, an optional extra not installed, a setting with a value it cannot take.

Each layer keeps its own in its ``errors.py`` (``converters/errors.py``, ``app/runtime/errors.py``,
``app/serving/errors.py``...); the whole tree, with each code's HTTP status and exit code, is generated from
them into docs/errors.md."""

from __future__ import annotations

import itertools
import reprlib
from typing import Any, ClassVar


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


class MissingExtraError(UserInputError):
    """A command needs a package of an optional extra that is not installed (``pip install 'lnserve[X]'``)."""

    code = "missing_extra"

    def __init__(self, what: str, module: str, extra: str) -> None:
        self.module, self.extra = module, extra
        super().__init__(f"{what} needs {module}, which is not installed: pip install 'lnserve[{extra}]'")


class InvalidSettingError(UserInputError):
    """A setting (``LNSERVE_*`` variable or ``serve`` flag) has a value it cannot take: a configuration
    mistake, reported as one line (CLI exit 2), not as a validation dump."""

    code = "invalid_setting"


def shown(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``...), so that a name taken from
    a hostile file cannot drive the terminal it is printed on; printable Unicode stays as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def clip(text: str, limit: int = 120) -> str:
    """``text`` with control characters escaped, cut to ``limit`` characters for an error message."""
    text = shown(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _BoundedRepr(reprlib.Repr):
    """``reprlib``'s bounded ``repr`` (a few levels, a few items each), also for OrderedDicts, without
    sorting keys, and for integers of any size (``repr`` of a 100,000-digit int raises)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple = 3, 4, 6, 6
        self.maxstring, self.maxother, self.maxlong = 60, 60, 40

    def repr_dict(self, x: Any, level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [
            f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
            for k, v in itertools.islice(x.items(), self.maxdict)
        ]
        return "{" + ", ".join(items) + (", ...}" if len(x) > self.maxdict else "}")

    def repr_OrderedDict(self, x: Any, level: int) -> str:
        return f"OrderedDict({self.repr_dict(x, level)})"

    def repr_int(self, x: Any, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_BRIEF = _BoundedRepr()


def brief(value: Any, limit: int = 80) -> str:
    """A short, bounded, terminal-safe ``repr`` of a value from an untrusted file: it never walks more than
    a few items of a few levels, whatever the object graph (plain ``repr`` of a shared DAG never ends)."""
    return clip(_BRIEF.repr(value), limit)
