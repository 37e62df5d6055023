"""Gallery errors, all under the lnserve root so the CLI (exit 2) and HTTP (4xx) map them by class.

UserInputError
└── GalleryError            (gallery_error)      422
    ├── GalleryNotFoundError   (gallery_not_found)  404  no gallery of that name
    ├── GalleryExistsError     (gallery_exists)     409  create with a taken name
    ├── ItemNotFoundError      (item_not_found)     404  no live item with that id
    ├── DuplicateItemError     (duplicate_item)     409  id already present (or repeated in one batch)
    ├── GalleryMismatchError   (gallery_mismatch)   422  wrong model or item kind for this gallery
    └── GalleryInputError      (invalid_input)      422  bad name, vector shape, k, payload
LnserveError
└── GalleryCorruptError     (gallery_corrupt)    500  files on disk disagree with the database
"""

from __future__ import annotations

from lnserve.converters.errors import LnserveError, UserInputError


class GalleryError(UserInputError):
    """A gallery request cannot be served as asked."""

    code = "gallery_error"


class GalleryNotFoundError(GalleryError):
    """No gallery of that name exists."""

    code = "gallery_not_found"
    http_status = 404


class GalleryExistsError(GalleryError):
    """A gallery of that name already exists."""

    code = "gallery_exists"
    http_status = 409


class ItemNotFoundError(GalleryError):
    """The gallery has no live item with that id."""

    code = "item_not_found"
    http_status = 404


class DuplicateItemError(GalleryError):
    """An item id is already in the gallery or repeated within one batch."""

    code = "duplicate_item"
    http_status = 409


class GalleryMismatchError(GalleryError):
    """The model or the item kind does not match the gallery's."""

    code = "gallery_mismatch"


class GalleryInputError(GalleryError):
    """A gallery name, vector, payload or k is malformed or out of range."""

    code = "invalid_input"


class GalleryCorruptError(LnserveError):
    """The gallery's vector file is shorter than its database says (disk damage or outside tampering)."""

    code = "gallery_corrupt"
