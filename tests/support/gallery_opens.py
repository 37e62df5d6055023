"""Counting how often a gallery store opens and checks a gallery (the real method still runs)."""

from __future__ import annotations

from typing import Any

import pytest

from lnserve.app.galleries.store import GalleryStore


def count_gallery_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that receives a gallery's name each time any ``GalleryStore`` (shards included) opens it."""
    opens: list[str] = []
    real = GalleryStore._open_in_txn

    def counted(self: GalleryStore, name: str, db: Any, *, scan: bool) -> Any:
        opens.append(name)
        return real(self, name, db, scan=scan)

    monkeypatch.setattr(GalleryStore, "_open_in_txn", counted)
    return opens
