"""Model names end up in URLs (``/models/NAME/reload``): a name no path segment can address is refused where
it is made (convert, pull, train: ``model_name``) and where a server reads it from a manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest

from lnserve.app.serving.registry import resolve_model_dirs
from lnserve.app.settings import Settings
from lnserve.converters.artifact import MANIFEST, check_model_name, model_name
from lnserve.converters.errors import ArtifactError
from lnserve.converters.url_segment import segment_fault
from tests.conftest import run_cli
from tests.support.hostile_strings import HOSTILE


@pytest.mark.parametrize("name", HOSTILE)
def test_a_model_name_is_refused_or_one_url_segment(name: str) -> None:
    if name == "" or segment_fault(name) is not None:
        with pytest.raises(ArtifactError, match="bad model name"):
            check_model_name(name)
    else:
        assert check_model_name(name) == name
        assert "/" not in quote(name, safe="") and quote(name, safe="") not in (".", "..")


def test_model_name_refuses_what_convert_would_write(tmp_path: Path) -> None:
    assert model_name(tmp_path / "oe") == "oe"
    with pytest.raises(ArtifactError, match=r"bad model name '\.\.'"):
        model_name(tmp_path / "oe", "..")
    proc = run_cli("convert", "order-embedding", "nowhere", "--out", str(tmp_path / "x"), "--name", "a/b")
    assert proc.returncode == 2 and proc.stderr.startswith("lnserve: error [artifact_error]: "), proc.stderr


@pytest.mark.parametrize("name", ["..", "a/b", "tab\there"])
def test_a_manifest_name_no_url_can_address_stops_the_server_start(
    artifacts: dict[str, Path], tmp_path: Path, name: str
) -> None:
    art = tmp_path / "model"
    shutil.copytree(artifacts["oe_order_gru"], art)
    manifest = json.loads((art / MANIFEST).read_text(encoding="utf-8"))
    (art / MANIFEST).write_text(json.dumps({**manifest, "name": name}), encoding="utf-8")
    with pytest.raises(ArtifactError, match="bad model name") as refused:
        resolve_model_dirs(Settings(models=[art]))
    assert str(art) in str(refused.value)
