"""The guards every gallery use runs under: out of space reported as such, and a use that loses the race with
a removal reported as ``gallery_not_found``. The store's public methods carry them; the parts behind it
(repository, checker, searcher) do not, so each use is guarded once, around the whole of it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from lnserve.storage import out_of_space_reported as _storage_out_of_space_reported

from .errors import GalleryCorruptError

if TYPE_CHECKING:
    from .repository import GalleryRepository

_Method = TypeVar("_Method", bound=Callable[..., Any])


class Guarded(Protocol):
    """What the guards need of the object whose methods they wrap: its repository."""

    @property
    def repo(self) -> GalleryRepository: ...


def out_of_space_reported(method: _Method) -> _Method:
    """A use that runs out of space raises ``StorageFullError`` naming the gallery (HTTP 507), not a bare
    OSError or SQLite's "disk I/O error": nothing acknowledged is lost (vectors are appended past the
    acknowledged end and committed after their fsync; a failed append cuts its tail at once). Every write
    path has it, and so do reads: SQLite writes a WAL index file to open a database, even to read it."""

    @functools.wraps(method)
    def checked(self: Guarded, name: str, *args: Any, **kwargs: Any) -> Any:
        with _storage_out_of_space_reported(f"gallery {name!r}", self.repo.root):
            return method(self, name, *args, **kwargs)

    return checked  # type: ignore[return-value]


def removal_reported(method: _Method) -> _Method:
    """A use that loses the race with a removal (``DELETE /galleries/NAME``, ``lnserve gallery rm``) raises
    ``GalleryNotFoundError``: its files vanish mid-use, which would otherwise read as damage (a missing lock
    or vector file: a false ``gallery_corrupt``) or as an I/O error (SQLite opening the WAL of a renamed
    database). The gallery's directory is identified when the use starts: if it is gone, replaced or (made
    meanwhile) new when the use fails, the failure is the race's, never reported as anything else.

    A directory's identity is its inode, and a removed gallery's inode number can be reused at once by the
    next creation of the same name, which then looks like the same directory. So damage is reported only when
    a second look finds it too: a race's damage is gone by then (the gallery answers, or is not found), real
    damage is not (and a failed use has changed nothing: every write is all or none)."""

    @functools.wraps(method)
    def checked(self: Guarded, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            with self.repo.removal_is_not_found(name):
                return method(self, name, *args, **kwargs)
        except GalleryCorruptError:
            with self.repo.removal_is_not_found(name):
                return method(self, name, *args, **kwargs)

    return checked  # type: ignore[return-value]
