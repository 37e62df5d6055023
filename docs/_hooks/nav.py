"""mkdocs hook: every ``docs/*.md`` the nav in mkdocs.yml does not name is added under "Topics", titled by
its first heading, so that a page added by topic is part of the site without editing the config."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
            return line[2:].strip()
    return page.stem.replace("-", " ").capitalize()


def on_config(config: Any) -> Any:
    nav = config["nav"] or []
    named = _named(nav)
    docs = Path(config["docs_dir"])
    extra = [{_title(p): p.name} for p in sorted(docs.glob("*.md")) if p.name not in named]
    if extra:
        config["nav"] = [*nav, {"Topics": extra}]
    return config
