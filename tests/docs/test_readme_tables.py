"""The docs' settings and errors tables (docs/settings.md, docs/http-api.md) are read from the code, so
neither can drift from it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import lnserve.app.http.main
from lnserve.app.galleries.layout import default_root
from lnserve.app.galleries.store import GalleryStore
from lnserve.app.http.errors import http_error_codes
from lnserve.app.http.routes import ROUTER_MODULES
from lnserve.app.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"
SETTINGS = (DOCS / "settings.md", "# Settings")
ERRORS = (DOCS / "http-api.md", "## Errors")
_CODE = re.compile(r"`([a-z_]+)`")
_VAR = re.compile(r"`(LNSERVE_[A-Z0-9_]+)`")


def _table(where: tuple[Path, str]) -> list[list[str]]:
    """The rows (cells, stripped) of the first table after the heading, header and rule left out."""
    page, heading = where
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table under {heading!r}"
    return rows[2:]


def _env_names() -> set[str]:
    return {f"LNSERVE_{name.upper()}" for name in Settings.model_fields}


def test_settings_table_lists_every_setting_and_nothing_else() -> None:
    documented = [v for row in _table(SETTINGS) for v in _VAR.findall(row[0])]
    assert len(documented) == len(set(documented)), "a setting is listed twice"
    assert set(documented) == _env_names(), (
        f"missing from docs/settings.md: {sorted(_env_names() - set(documented))}; "
        f"not settings: {sorted(set(documented) - _env_names())}"
    )


def _literal(cell: str) -> str | None:
    """A default cell part that states a value (`onnx`, 64, `false`), or None for prose (4 MiB, first)."""
    m = re.fullmatch(r"`?([\w.:-]+)`?", cell.strip())
    return m.group(1) if m and (cell.startswith("`") or re.fullmatch(r"[\d.]+", m.group(1))) else None


def test_settings_table_defaults_that_state_a_value_are_the_real_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _env_names():
        monkeypatch.delenv(name, raising=False)
    defaults = Settings().model_dump()
    checked = 0
    for row in _table(SETTINGS):
        names, values = _VAR.findall(row[0]), row[1].split(" / ")
        if len(names) != len(values):
            continue
        for var, cell in zip(names, values, strict=True):
            literal = _literal(cell)
            if literal is None:
                continue
            real = defaults[var.removeprefix("LNSERVE_").lower()]
            if isinstance(real, bool):
                assert literal == str(real).lower(), var
            elif isinstance(real, int | float):
                assert float(literal) == float(real), var
            else:
                assert literal == str(real), var
            checked += 1
    assert checked >= 10  # the parser still understands the table


def test_errors_table_is_the_code_table() -> None:
    for name in ROUTER_MODULES:  # every error class the routes can raise is loaded
        importlib.import_module(f"lnserve.app.http.routes.{name}")
    assert lnserve.app.http.main.create_app  # the factory's imports are loaded too
    # start-up-only errors (bind) and the Ray ones are loaded too: whatever ran before, the table is the same
    importlib.import_module("lnserve.app.http.server")
    importlib.import_module("lnserve.app.scale.galleries")
    documented: dict[str, int] = {}
    for row in _table(ERRORS):
        status = int(row[0])
        for code in _CODE.findall(row[1]):
            assert code not in documented, f"{code} is listed twice"
            documented[code] = status
    assert documented == http_error_codes()


def test_scorer_and_galleries_dir_are_read_through_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """LNSERVE_SCORER and LNSERVE_GALLERIES_DIR reach the store through Settings and nowhere else."""
    monkeypatch.setenv("LNSERVE_SCORER", "numpy")
    monkeypatch.setenv("LNSERVE_GALLERIES_DIR", str(tmp_path / "g"))
    built = lnserve.app.http.main.create_app()
    assert (built.state.galleries.root, built.state.galleries.scorer) == (tmp_path / "g", "numpy")
    assert GalleryStore().root == default_root() != tmp_path / "g"  # the store itself reads no variable
    monkeypatch.setenv("LNSERVE_SCORER", "fastest")
    with pytest.raises(ValueError, match="unknown scorer"):
        Settings()
