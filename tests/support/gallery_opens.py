"""Counting how often a gallery store opens and checks a gallery (the real method still runs)."""

from __future__ import annotations

from typing import Any

import pytest

from lnserve.app.galleries.checks import GalleryChecker


def count_gallery_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that receives a gallery's name each time any ``GalleryStore`` (shards included) opens it."""
    opens: list[str] = []
    real = GalleryChecker.read_checked

    def counted(self: GalleryChecker, name: str, db: Any, *, scan: bool) -> Any:
        opens.append(name)
        return real(self, name, db, scan=scan)

    monkeypatch.setattr(GalleryChecker, "read_checked", counted)
    return opens
