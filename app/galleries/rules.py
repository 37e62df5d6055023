"""Naming and payload rules: gallery names, item ids, payloads, vectors and the query-kind rule."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...converters import bounded_json
from ...converters.bounded_json import check_depth
from ...converters.families import family_of
from ...converters.url_segment import SEGMENT_RULE, segment_fault
from ..runtime.model_ref import ModelRef
from ..runtime.precisions import describe_identity
from ..runtime.retrieval import Side
from .errors import (
    DuplicateItemError,
    GalleryCorruptError,
    GalleryInputError,
    GalleryMismatchError,
    InvalidItemIdError,
)
from .layout import (
    DB,
    KINDS,
    GalleryInfo,
)

# The one definition of a gallery name (store, HTTP schemas, CLI); always matched whole (``fullmatch``): a
# ``$`` anchor would also match before a trailing newline and let ``"evil\n"`` become a directory name.
GALLERY_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"


GALLERY_NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting alphanumeric"


NAME_RE = re.compile(GALLERY_NAME_PATTERN)


def check_gallery_name(name: Any) -> str:
    """``name`` if it is a valid gallery name (matched whole), else GalleryInputError."""
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise GalleryInputError(f"bad gallery name {name!r}: use {GALLERY_NAME_RULE}")
    return name


def require_utf8(text: str, what: str) -> None:
    """Lone UTF-16 surrogates (legal in JSON escapes) cannot be stored or sent back: refuse them up front."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise GalleryInputError(f"{what} must be valid Unicode (no lone surrogates)") from None


# A payload stored from now on nests at most PAYLOAD_MAX_DEPTH levels. Stored ones are read within a bound
# too (a crafted database is quarantined, never a RecursionError), one above anything an older version
# could have stored (its request parser stopped near the interpreter's recursion limit), so no gallery
# written before the bound turns corrupt.
PAYLOAD_MAX_DEPTH = 128
PAYLOAD_READ_DEPTH = 1000


def dump_payload(payload: Any) -> str | None:
    if payload is None:
        return None
    try:
        check_depth(payload, PAYLOAD_MAX_DEPTH)
    except ValueError as exc:
        raise GalleryInputError(f"payload: {exc}") from None
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise GalleryInputError(f"payload is not JSON-serialisable ({exc})") from None
    require_utf8(text, "payloads")
    return text


def load_payload(name: str, text: Any) -> Any:
    if text is None:
        return None
    try:
        return bounded_json.loads(text, max_depth=PAYLOAD_READ_DEPTH)
    except (TypeError, ValueError):
        why = f"an item payload in {DB} is not JSON (or nests too deeply)"
        raise GalleryCorruptError(name, why) from None


def as_matrix(x: Any, dim: int, *, what: str, limit: int | None) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError):
        raise GalleryInputError(f"{what} must be numbers") from None
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise GalleryInputError(f"{what} must have shape (n, {dim}) for this gallery, got {np.shape(x)}")
    if limit is not None and arr.shape[0] > limit:
        raise GalleryInputError(f"at most {limit} {what} per request, got {arr.shape[0]}")
    if not np.isfinite(arr).all():
        raise GalleryInputError(f"{what} must be finite")
    return np.ascontiguousarray(arr)


def check_compatible(info: GalleryInfo, *, kind: str | None = None, model: ModelRef | None = None) -> None:
    if kind is not None and kind != info.kind:
        raise GalleryMismatchError(f"gallery {info.name!r} holds {info.kind}, not {kind}")
    if model is not None and not model.matches(info):
        raise GalleryMismatchError(
            f"gallery {info.name!r} was embedded with model {info.model!r} ({describe_pin(info)}), "
            f"not {model.name!r} (identity {describe_identity(model.identity_for(info.kind))})"
        )


def describe_pin(info: GalleryInfo) -> str:
    """How a gallery pins its model, for messages."""
    if info.model_identity is not None:
        return f"identity {describe_identity(info.model_identity)}"
    return f"manifest sha256 {info.model_sha256[:12]}"


def new_item_id() -> str:
    """A random item id (32 hex digits) for an item added without one: the one definition (store, routes)."""
    return uuid.uuid4().hex


ITEM_ID_RULE = f"1-256 characters, {SEGMENT_RULE}"


def check_item_id(item_id: Any) -> str:
    """The id as stored, if a new item may take it: the one rule (store, HTTP route, CLI). An id must be
    addressable as one URL path segment (``/galleries/NAME/items/ID``); items stored before this rule with
    other ids stay reachable by ``?id=`` (``GET`` / ``DELETE /galleries/NAME/items?id=...``).

    Raises:
        GalleryInputError: not a string. InvalidItemIdError: empty, too long, not valid Unicode, or not
        addressable in a URL path.
    """
    if isinstance(item_id, bool) or not isinstance(item_id, str | int):
        raise GalleryInputError(f"item ids must be strings, got {type(item_id).__name__}")
    s = str(item_id)
    if not 1 <= len(s) <= 256:
        raise InvalidItemIdError(f"item ids must be 1-256 characters, got {len(s)}")
    try:
        require_utf8(s, "item ids")
    except GalleryInputError as exc:
        raise InvalidItemIdError(str(exc)) from None
    fault = segment_fault(s)
    if fault is not None:
        raise InvalidItemIdError(f"bad item id {s!r:.80}: {fault}; use {ITEM_ID_RULE}")
    return s


class ItemIds(tuple[str, ...]):
    """Ids that passed ``check_item_id`` (or were made by ``new_item_id``): ``item_ids`` makes them, and
    whoever is handed them does not check them again (the HTTP add checks them before encoding; the store
    then does not check them twice)."""

    __slots__ = ()


def item_ids(given: ItemIds | Sequence[Any] | None, n: int) -> ItemIds:
    """Each given id checked (as given: checked already, kept); ``n`` new ones when none are given."""
    if isinstance(given, ItemIds):
        return given
    if given is None:
        return ItemIds(tuple(new_item_id() for _ in range(n)))
    return ItemIds(tuple(check_item_id(i) for i in given))


@dataclass(frozen=True)
class NewItems:
    """A batch ready to store: unique checked ids, payloads as stored (JSON text or None), one per vector."""

    ids: tuple[str, ...]
    payloads: tuple[str | None, ...]


def new_items(n: int, ids: ItemIds | Sequence[Any] | None, payloads: Sequence[Any] | None) -> NewItems:
    """The rules of a batch of ``n`` new items, in order: ids, payloads, one of each per item, unique ids.

    Raises:
        GalleryInputError, InvalidItemIdError, DuplicateItemError.
    """
    checked = item_ids(ids, n)
    payload_json = tuple([None] * n if payloads is None else [dump_payload(p) for p in payloads])
    if len(checked) != n or len(payload_json) != n:
        raise GalleryInputError(f"{n} vectors but {len(checked)} ids and {len(payload_json)} payloads")
    if len(set(checked)) != n:
        dup = next(i for i in checked if checked.count(i) > 1)
        raise DuplicateItemError(f"id {dup!r} appears more than once in the batch")
    return NewItems(checked, payload_json)


def check_item_kinds(info: GalleryInfo, items: Sequence[Any]) -> None:
    """The one statement of what a new item must carry for its gallery: a caption (``text``) for a
    captions gallery, image features (``image``) for an images gallery.

    Raises:
        GalleryMismatchError: the first item without it.
    """
    wanted = "text" if info.kind == "captions" else "image"
    wrong = next((i for i, it in enumerate(items) if getattr(it, wanted) is None), None)
    if wrong is not None:
        raise GalleryMismatchError(f"gallery {info.name!r} holds {info.kind}: item {wrong} has no {wanted!r}")


def check_image_query(info: GalleryInfo) -> None:
    """The one statement of the rule that an image query needs a captions gallery (image->image is not an
    order-embedding score). ``serving.retrieval.retrieve`` applies it before encoding; the store's
    ``query_side`` before scanning, for every caller of ``search``.

    Raises:
        GalleryMismatchError: the gallery holds images.
    """
    if info.kind == "images":
        raise GalleryMismatchError(
            f"gallery {info.name!r} holds images: query it with captions (image->image is not defined)"
        )


def query_side(info: GalleryInfo, query_kind: str) -> Side:
    """The slot of E(caption, image) the query fills: caption->images, image->captions, caption->captions."""
    if query_kind not in KINDS:
        raise GalleryInputError(f"query kind must be one of {', '.join(KINDS)}, got {query_kind!r}")
    if query_kind == "images":
        check_image_query(info)
    if query_kind == "images" and family_of(info.family).text_only:
        raise GalleryMismatchError(f"{info.family} models have no image encoder")
    return "image" if query_kind == "images" else "caption"
