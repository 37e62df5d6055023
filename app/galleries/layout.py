"""A gallery on disk and its types: the file names, the limits, what a gallery is (``GalleryInfo``), a
quarantined one (``CorruptGallery``) and the check / repair reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime.precisions import one_profile
from ..runtime.retrieval import score_info

KINDS = ("images", "captions")


MAX_K = 1000


MAX_QUERIES = 1024


MAX_DIM = 1 << 16


DB, VECTORS, LOCK = "gallery.sqlite", "vectors.f32", "write.lock"


def default_root() -> Path:
    """``~/.local/share/lnserve/galleries``: the root when none is given (``LNSERVE_GALLERIES_DIR`` is read
    by ``lnserve.app.settings.Settings``, whose ``galleries_dir`` callers pass)."""
    return Path.home() / ".local" / "share" / "lnserve" / "galleries"


def same_model(a: GalleryInfo, b: GalleryInfo) -> bool:
    """Whether two galleries were embedded by the same model at one precision profile, so that one's
    items may query the other (both identities known: compare them, ``runtime.precisions.one_profile``;
    else the manifests they pinned, conservatively)."""
    if a.model_identity is not None and b.model_identity is not None:  # and at one precision profile
        return one_profile((a.kind, a.model_identity), (b.kind, b.model_identity))
    return a.model_sha256 == b.model_sha256


@dataclass(frozen=True)
class GalleryInfo:
    name: str
    uid: str
    kind: str
    dim: int
    model: str
    model_sha256: str  # the model's manifest.json when the gallery was made (pinned by older galleries)
    family: str
    method: str
    metric: str
    created_at: float
    model_identity: str | None = None  # None: made before identities; pinned by model_sha256 until used
    count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "score": score_info(self.metric), "state": "ok", "reason": None}

    def summary(self) -> dict[str, Any]:
        """One line of ``/info``."""
        return {"name": self.name, "state": "ok", "reason": None, "kind": self.kind, "model": self.model,
                "count": self.count, "metric": self.metric}  # fmt: skip


@dataclass(frozen=True)
class CorruptGallery:
    """A quarantined gallery: why it cannot be served, and what could still be read of it."""

    name: str
    reason: str
    info: GalleryInfo | None = None

    def as_dict(self) -> dict[str, Any]:
        known = self.info.as_dict() if self.info is not None else {}
        return {**known, "name": self.name, "state": "corrupt", "reason": self.reason}

    def summary(self) -> dict[str, Any]:
        known = self.info.summary() if self.info is not None else {}
        return {"kind": None, "model": None, "count": None, "metric": None, **known,
                "name": self.name, "state": "corrupt", "reason": self.reason}  # fmt: skip


GalleryEntry = GalleryInfo | CorruptGallery


@dataclass(frozen=True)
class CheckReport:
    """``check``: the gallery's state, what was verified, and the first fault found (if any)."""

    name: str
    ok: bool
    reason: str | None
    rows: int  # acknowledged rows (live items + tombstones)
    count: int  # live items
    verified_rows: int  # rows verified against their checksums
    legacy_rows: int  # rows without checksums (made before them), checked for finite values only
    good_rows: int  # rows [0, good_rows) are consistent: what repair keeps


@dataclass(frozen=True)
class RepairReport:
    """``repair``: what was wrong, what was cut, and what was dropped."""

    name: str
    reason: str | None  # the fault repaired (None: nothing to repair)
    rows_before: int
    rows_after: int
    dropped_ids: list[str] = field(default_factory=list)  # live items removed, in insertion order
    fixed: list[str] = field(default_factory=list)  # other fixes (recreated files, recounted counters)
    applied: bool = True  # False for a dry run

    @property
    def changed(self) -> bool:
        return self.rows_after != self.rows_before or bool(self.dropped_ids) or bool(self.fixed)


@dataclass(frozen=True)
class State:
    """One read of a gallery's database, checked against its files."""

    info: GalleryInfo
    n_rows: int
    n_deleted: int
    repairs: int  # counter bumped by every repair: cached state from before one is never reused
    vectors_id: tuple[int, int]  # (st_dev, st_ino) of vectors.f32: a replaced file is verified afresh

    @property
    def key(self) -> tuple[str, int, tuple[int, int]]:
        """What cached verification and snapshots are valid for (rows aside)."""
        return (self.info.uid, self.repairs, self.vectors_id)


@dataclass
class Snapshot:
    """Per-gallery search state cached between queries: which rows are live, the vector map, and for cosine
    galleries each row's canonical norm (``row_norms``), computed once per row from the verified vectors."""

    key: tuple[str, int, tuple[int, int]]
    n_rows: int
    n_deleted: int
    valid: np.ndarray
    vectors: np.ndarray | None
    norms: np.ndarray | None = None


@dataclass(frozen=True)
class AddedItems:
    """An acknowledged add: the items' ids, and the gallery's live items once they were committed."""

    ids: list[str]
    count: int
