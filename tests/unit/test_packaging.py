"""``pip install .`` must add exactly one import package, ``lnserve``: generic names such as ``app`` or
``models`` in site-packages would break (or be broken by) any other project in the same environment.

The core install serves, converts, exports, pulls and keeps galleries without torch; the extras add the rest
(``lnserve[torch]``, ``[eval]``, ``[ray]``, ``[all]``, ``[dev]``). That the core commands run without the
extras' packages is tested in ``tests/e2e/test_without_extras.py``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]
# what no core install may bring: the extras' packages and the development tools
NOT_CORE = {"torch", "scikit-learn", "scipy", "ray", "pytest", "hypothesis", "ruff", "mypy", "schemathesis"}


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalised (``ray[serve]>=2.60,<3`` -> ``ray``)."""
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _expanded(extra: str) -> set[str]:
    """Every distribution ``lnserve[extra]`` adds, through its ``lnserve[...]`` references."""
    out: set[str] = set()
    for req in EXTRAS[extra]:
        if _name(req) == "lnserve":
            for inner in re.findall(r"\[(.*?)\]", req)[0].split(","):
                out |= _expanded(inner.strip())
        else:
            out.add(_name(req))
    return out


def test_the_core_has_no_extra_and_no_tool() -> None:
    core = {_name(r) for r in PROJECT["dependencies"]}
    assert core & NOT_CORE == set()
    every_extra = set().union(*(_expanded(e) for e in EXTRAS))
    assert core & every_extra == set(), "a package both in the core and in an extra"


def test_the_extras() -> None:
    """torch pinned in its own extra (the faithful cells' release); eval brings torch (SICK-R and --fast fit
    with it); all is every runtime extra; dev is all plus the tools."""
    assert EXTRAS["torch"] == ["torch==2.13.0"]
    assert _expanded("eval") == {"torch", "scikit-learn", "scipy"}
    assert _expanded("ray") == {"ray"}
    assert _expanded("all") == _expanded("torch") | _expanded("eval") | _expanded("ray")
    assert _expanded("dev") > _expanded("all") | {"pytest", "ruff", "mypy"}
    assert set(EXTRAS) == {"torch", "eval", "ray", "all", "dev"}


@pytest.mark.parametrize("extra", ["torch", "eval", "ray"])
def test_each_extra_names_its_install_in_the_error_messages(extra: str) -> None:
    """``lnserve.extras`` knows every runtime extra (its messages say ``pip install 'lnserve[X]'``)."""
    from lnserve.extras import EXTRAS as KNOWN

    assert extra in KNOWN


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
    metadata = Parser().parsestr(
        zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    )
    assert set(metadata.get_all("Provides-Extra") or []) == set(EXTRAS)
    requires = metadata.get_all("Requires-Dist") or []
    unconditional = {_name(r) for r in requires if "extra ==" not in r}
    assert unconditional & NOT_CORE == set()  # the wheel's core: no torch, no tool
    assert any(r.startswith("torch==2.13.0") and 'extra == "torch"' in r for r in requires)
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
