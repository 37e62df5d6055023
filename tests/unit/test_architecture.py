"""The house as a static reader sees it (issue 32's mechanical check): the checkout's source, not the
installed package, so what an IDE, pyright or a dependency grapher follows is what is held.

The figures come from ``tests/support/architecture.py`` (``python -m tests.support.architecture`` prints
them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import architecture as arch


@pytest.fixture(scope="module")
def imports() -> list[arch.Import]:
    return arch.all_imports()


def test_model_families_are_compared_only_in_the_family_module() -> None:
    found = arch.family_comparisons()
    assert len(found) <= 4, found
    assert {f.split(":")[0] for f in found} <= {"converters/families.py"}, found


def test_no_private_name_is_imported_across_modules(imports: list[arch.Import]) -> None:
    assert arch.private_imports(imports) == []
    assert arch.private_attribute_uses() == []


def test_no_class_has_more_than_30_methods_with_its_bases() -> None:
    assert {k: v for k, v in arch.method_counts().items() if v > 30} == {}


def test_no_route_handler_is_longer_than_20_lines() -> None:
    lengths = arch.route_handler_lengths()
    assert len(lengths) >= 30  # the measure finds the handlers (every router's decorators)
    assert {k: v for k, v in lengths.items() if v > 20} == {}


def test_every_import_of_the_package_is_followed_on_the_file_system(imports: list[arch.Import]) -> None:
    """Inside and between app/, models/ and converters/ imports are relative (they resolve the same at run
    time and in the checkout); only the facade outside tools import, ``lnserve.eval``, names the installed
    path, because it lives in ``lnserve/`` and the mapped folders are not below it in the checkout."""
    assert [u for u in arch.unfollowable_imports(imports) if not u.startswith("lnserve/eval/")] == []
    assert sum(1 for i in imports if i.target is not None) > 500


def test_the_layers_have_no_edge_running_up_and_no_cycle(imports: list[arch.Import]) -> None:
    assert arch.upward_edges(imports) == []
    assert arch.import_cycles(imports) == []


def test_every_file_is_in_a_layer() -> None:
    for path in arch.python_files():
        arch.layer_of(arch.rel(path))


# -- the measure itself, on small made-up trees: it must see what it claims to see ---------------------------
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_measure_finds_a_cycle_an_upward_edge_and_a_private_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(
        tmp_path,
        {
            "lnserve/__init__.py": "",
            "models/__init__.py": "",
            "models/a.py": "from ..app.serving.x import thing\n",  # models -> serving: up
            "app/__init__.py": "",
            "app/serving/__init__.py": "",
            "app/serving/x.py": "from .y import _hidden\nthing = 1\n",
            "app/serving/y.py": "from .x import thing\n_hidden = 2\n",
            "app/serving/z.py": (
                "from lnserve.app.serving.x import thing\nif f == 'skip-thoughts':\n    pass\n"
            ),
        },
    )
    monkeypatch.setattr(arch, "ROOT", tmp_path)
    found = arch.all_imports()
    assert arch.upward_edges(found) == ["models/a.py -> app/serving/x.py"]
    assert arch.import_cycles(found) == [["app/serving/x.py", "app/serving/y.py"]]
    assert arch.private_imports(found) == ["app/serving/x.py:1 .y._hidden"]
    assert arch.unfollowable_imports(found) == ["app/serving/z.py:1 lnserve.app.serving.x"]
    assert arch.family_comparisons() == ["app/serving/z.py:2"]


def test_the_measure_counts_methods_through_bases_and_handler_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = "class Base:\n" + "".join(f"    def b{i}(self): ...\n" for i in range(20))
    child = "class Child(Base):\n" + "".join(f"    def c{i}(self): ...\n" for i in range(11))
    handler = "@router.post('/x')\nasync def handler():\n" + "    pass\n" * 20
    _write(tmp_path, {"app/__init__.py": "", "app/k.py": base + child, "app/r.py": handler})
    monkeypatch.setattr(arch, "ROOT", tmp_path)
    assert arch.method_counts() == {"app/k.py:Base": 20, "app/k.py:Child": 31}
    assert arch.route_handler_lengths() == {"app/r.py:handler": 21}
    ast.parse(handler)  # the made-up handler is valid Python
