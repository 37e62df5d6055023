"""``pip install .`` must add exactly one import package, ``lnserve``: generic names such as ``app`` or
``models`` in site-packages would break (or be broken by) any other project in the same environment."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
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
    # installed (here: unpacked), the package's own subfolders serve; the checkout finder stays out
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    found = _import_with_path([site], "lnserve.app.settings", cwd=tmp_path)
    assert found == {"file": str(site / "lnserve/app/settings.py"), "checkout_finder": False}


def _import_with_path(path: list[Path], module: str, *, cwd: Path) -> dict[str, object]:
    """Import ``module`` in a fresh interpreter whose sys.path is ``path`` plus the bare site-packages (no
    ``.pth`` processed: no editable finder), from ``cwd``; where it came from and how."""
    site_packages = sysconfig.get_paths()["purelib"]
    code = (
        "import json, sys, importlib\n"
        f"sys.path[:] = {[str(p) for p in path]!r} + sys.path + [{site_packages!r}]\n"
        f"m = importlib.import_module({module!r})\n"
        "print(json.dumps({'file': m.__file__, 'editable': [type(f).__name__ for f in sys.meta_path "
        "if 'Editable' in type(f).__name__], 'checkout_finder': any(type(f).__name__ == '_CheckoutFinder' "
        "for f in sys.meta_path)}))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out.pop("editable") == []  # the venv's editable install played no part
    return out  # type: ignore[no-any-return]


def test_the_checkout_resolves_every_subpackage_without_an_install(tmp_path: Path) -> None:
    """From the source tree alone (no editable finder, another working directory), ``lnserve.app``,
    ``.models`` and ``.converters`` are the checkout's folders, as the install maps them: what Ray's
    ``lnserve.app.scale.proxy:middlewares`` and source tools need."""
    for module, folder in (
        ("lnserve.app.scale.proxy", "app/scale/proxy.py"),
        ("lnserve.models", "models/__init__.py"),
        ("lnserve.converters.artifact", "converters/artifact.py"),
    ):
        found = _import_with_path([ROOT], module, cwd=tmp_path)
        assert found == {"file": str(ROOT / folder), "checkout_finder": True}


def test_every_source_package_is_installed() -> None:
    """setup.py lists packages by discovery; a folder without ``__init__.py`` would silently be left out."""
    for sub in ("app", "models", "converters"):
        for folder in (ROOT / sub).rglob("*"):
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
                assert (folder / "__init__.py").exists(), f"{folder} has modules but no __init__.py"
