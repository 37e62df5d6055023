"""The documentation site builds with ``mkdocs build --strict`` (a broken link or page fails), and a
page added to docs/ by topic is part of the site without editing mkdocs.yml."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra")
pytest.importorskip("material", reason="mkdocs-material is in the dev extra")


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(root / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_site_builds_strict_with_every_page(tmp_path: Path) -> None:
    proc = _build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in (ROOT / "docs").glob("*.md"):
        built = tmp_path / "site" / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} is not in the site"


def test_a_page_added_by_topic_joins_the_nav(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "docs" / "zz-new-topic.md").write_text("# A new topic\n\nText.\n", encoding="utf-8")
    proc = _build(tmp_path, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "A new topic" in home and "zz-new-topic/" in home
