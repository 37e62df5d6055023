"""Gallery errors, all under the lnserve root: codes only (CLI exit 2; ``app.http.errors`` maps codes to
HTTP). ``GalleryError`` and its kinds are the caller's; ``GalleryCorruptError`` is a damaged gallery,
quarantined until ``lnserve gallery check / repair``. The whole tree, generated from the code:
docs/errors.md.
"""

from __future__ import annotations

from lnserve.errors import LnserveError, UserInputError


class GalleryError(UserInputError):
    """A gallery request cannot be served as asked."""

    code = "gallery_error"


class GalleryNotFoundError(GalleryError):
    """No gallery of that name exists."""

    code = "gallery_not_found"


class GalleryExistsError(GalleryError):
    """A gallery of that name already exists."""

    code = "gallery_exists"


class ItemNotFoundError(GalleryError):
    """The gallery has no live item with that id."""

    code = "item_not_found"


class DuplicateItemError(GalleryError):
    """An item id is already in the gallery or repeated within one batch."""

    code = "duplicate_item"


class GalleryMismatchError(GalleryError):
    """The model or the item kind does not match the gallery's."""

    code = "gallery_mismatch"


class GalleryInputError(GalleryError):
    """A gallery name, vector, payload or k is malformed or out of range."""

    code = "invalid_input"


class InvalidItemIdError(GalleryInputError):
    """An item id that cannot be addressed as one URL path segment (``.``, ``..``, ``/``...): refused on
    add, since ``/galleries/NAME/items/..`` would address the gallery itself."""

    code = "invalid_item_id"


class GalleryCorruptError(LnserveError):
    """The gallery's files are damaged (unreadable database, missing or truncated file, a checksum that no
    longer matches): it is quarantined, refused for reads and writes until repaired. Not an input error:
    the server is fine and every other gallery serves; this one is unavailable."""

    code = "gallery_corrupt"
    exit_code = 2

    def __init__(self, gallery: str, reason: str) -> None:
        super().__init__(f"gallery {gallery!r} is corrupt: {reason}")
        self.gallery, self.reason = gallery, reason

    def __reduce__(self) -> tuple[type[GalleryCorruptError], tuple[str, str]]:
        return type(self), (self.gallery, self.reason)
