"""``pip install .`` must add exactly one import package, ``lnserve``: generic names such as ``app`` or
``models`` in site-packages would break (or be broken by) any other project in the same environment."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("lnserve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"lnserve"}
    for sub in ("app", "models", "converters"):
        assert f"lnserve/{sub}/__init__.py" in names
    assert "lnserve/eval/senteval.py" in names  # the public SentEval adapter (lnserve.eval.senteval)
    assert "lnserve/app/demo_model/weights.safetensors" in names  # the embedded demo travels with the package
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "lnserve = lnserve.app.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_every_source_package_is_installed() -> None:
    """setup.py lists packages by discovery; a folder without ``__init__.py`` would silently be left out."""
    for sub in ("app", "models", "converters"):
        for folder in (ROOT / sub).rglob("*"):
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
                assert (folder / "__init__.py").exists(), f"{folder} has modules but no __init__.py"
