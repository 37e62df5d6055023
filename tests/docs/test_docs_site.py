"""The documentation site builds with ``mkdocs build --strict`` (a broken link or page fails), and a
page added to docs/ by topic is part of the site without editing mkdocs.yml; every page is named in the nav,
no title shows markdown, the home page has a quick start and the README is in the site."""

from __future__ import annotations

import os
import re
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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    proc = _build(ROOT, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _nav_titles(site: Path) -> list[str]:
    """The titles of the site's navigation, as a reader sees them (the home page's sidebar)."""
    html = (site / "index.html").read_text(encoding="utf-8")
    return [t.strip() for t in re.findall(r'<span class="md-ellipsis">\s*(.*?)\s*</span>', html, flags=re.S)]


def test_every_page_is_named_in_the_nav_none_left_to_topics(site: Path) -> None:
    """Evaluation and LN skip-thoughts sat only under the hook's automatic "Topics" group."""
    titles = _nav_titles(site)
    assert "Topics" not in titles, titles
    assert {"Evaluation", "LN skip-thoughts", "README", "Home"} <= set(titles), titles


def test_no_title_shows_markdown(site: Path) -> None:
    """A page titled by its first heading showed literal backticks in the nav."""
    titles = _nav_titles(site)
    assert titles and not [t for t in titles if "`" in t], titles
    for html in site.rglob("index.html"):
        title = re.search(r"<title>(.*?)</title>", html.read_text(encoding="utf-8"), flags=re.S)
        assert title is not None and "`" not in title.group(1), html


def test_the_hook_titles_a_topic_page_without_backticks(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "docs" / "zz-code.md").write_text("# Running `lnserve zz`\n\nText.\n", encoding="utf-8")
    assert _build(tmp_path, tmp_path / "site").returncode == 0
    assert "Running lnserve zz" in _nav_titles(tmp_path / "site")


def test_home_has_a_quick_start(site: Path) -> None:
    html = (site / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", html)
    assert 'id="quick-start"' in html and "make serve" in text and "localhost:8000/encode" in text


def test_the_readme_is_in_the_site_with_its_links_working(site: Path) -> None:
    page = site / "readme" / "index.html"
    assert page.is_file()
    html = page.read_text(encoding="utf-8")
    first = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    assert first in html
    links = re.findall(r'href="(\.\./[^"#]+)', html)
    assert links and not [u for u in links if "docs/" in u], links
    for link in links:  # every relative link lands on a built page
        target = (page.parent / link).resolve()
        assert (target / "index.html").is_file() or target.is_file(), link
