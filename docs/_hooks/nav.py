"""mkdocs hook: every ``docs/*.md`` the nav in mkdocs.yml does not name is added under "Topics", titled by
its first heading as plain text (no markdown backticks), so that a page added by topic is part of the site
without editing the config; and the repository's README.md joins the site as ``readme.md``, its links to
``docs/*.md`` pointed at the pages (the README is the first screen of the repository, not a copy)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = "readme.md"
_CODE = re.compile(r"`([^`]*)`")
_DOCS_LINK = re.compile(r"\]\(docs/")


def _named(nav: list[Any]) -> set[str]:
    found: set[str] = set()
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found |= _named(value)
        elif isinstance(value, str):
            found.add(value)
    return found


def _title(page: Path) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return _CODE.sub(r"\1", line[2:]).strip()
    return page.stem.replace("-", " ").capitalize()


def on_config(config: Any) -> Any:
    nav = config["nav"] or []
    named = _named(nav)
    docs = Path(config["docs_dir"])
    extra = [
        {_title(p): p.name} for p in sorted(docs.glob("*.md")) if p.name not in named and p.name != README
    ]
    if extra:
        config["nav"] = [*nav, {"Topics": extra}]
    return config


def on_files(files: Files, config: Any) -> Files:
    """README.md as the page ``readme.md``: its ``docs/X.md`` links become ``X.md``."""
    readme = Path(config["docs_dir"]).parent / "README.md"
    if readme.is_file() and files.get_file_from_path(README) is None:
        text = _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))
        files.append(File.generated(config, README, content=text))
    return files
