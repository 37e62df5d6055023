"""One naming rule for every way a model artifact is made: the artifact directory's name, unless --name.

Before, ``convert order-embedding PREFIX --out DIR`` named the model after PREFIX's file name while
skip-thoughts took DIR's name, so ``serve --models DIR --default-model <DIR's name>`` failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lnserve.app.serving.registry import resolve_model_dirs
from lnserve.app.settings import Settings
from tests.conftest import LEGACY, run_cli


def _name(artifact: Path) -> str:
    return str(json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))["name"])


def _convert(family: str, out: Path, *extra: str) -> None:
    if family == "order-embedding":
        src = ("order-embedding", str(LEGACY / "order_embedding" / "oe_order_lngru"))
    else:
        st = LEGACY / "skipthoughts_gru"
        src = ("skip-thoughts", "--uni", str(st / "uni_skip.npz"), "--tables", str(st))
    run_cli("convert", *src, "--out", str(out), *extra, check=True)


@pytest.mark.parametrize("family", ["order-embedding", "skip-thoughts"])
def test_converted_model_is_named_after_its_directory(family: str, tmp_path: Path) -> None:
    out = tmp_path / "artifacts" / "my_model"
    _convert(family, out)
    assert _name(out) == "my_model"


@pytest.mark.parametrize("family", ["order-embedding", "skip-thoughts"])
def test_name_option_wins(family: str, tmp_path: Path) -> None:
    out = tmp_path / "my_model"
    _convert(family, out, "--name", "given")
    assert _name(out) == "given"


def test_default_model_by_directory_name_resolves(tmp_path: Path) -> None:
    """The README's ``serve --models artifacts/lngru_order --default-model lngru_order`` resolves."""
    out = tmp_path / "artifacts" / "lngru_order"
    _convert("order-embedding", out)
    resolved = resolve_model_dirs(Settings(models=[out], default_model="lngru_order"))
    assert [name for name, _, _ in resolved] == ["lngru_order"]
