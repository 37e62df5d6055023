"""Imports follow the data flow (models <- converters <- runtime <- app): each module is imported in a fresh
interpreter and ``sys.modules`` is inspected, so a stray import anywhere in the chain shows up.

Every package has its row: models imports nothing of lnserve; converters imports models; the runtime those
two; the gallery store and the schemas the runtime; training and pull (producers of artifacts for the CLI)
the layers below; the service (main, routes, registry, batcher, scale) anything but the producers.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lnserve.app

HTTP = ("fastapi", "starlette", "uvicorn")
EXTRA_PACKAGES = ("torch", "sklearn", "scipy", "ray")  # lnserve[torch], [eval], [ray]


def _loaded_after_import(module: str, *, whole_package: bool = False) -> set[str]:
    """Modules loaded by importing ``module`` (with ``whole_package``: it and every module under it)."""
    code = f"import json, sys, {module}\n"
    if whole_package:
        code += (
            "import importlib, pkgutil\n"
            f"for m in pkgutil.walk_packages({module}.__path__, '{module}.'):\n"
            "    importlib.import_module(m.name)\n"
        )
    code += "print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(proc.stdout))


def _offenders(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))


def _lnserve_outside(loaded: set[str], *allowed: str) -> list[str]:
    """lnserve modules loaded that are neither the root package, a parent of ``allowed``, nor under it."""
    ok = {
        "lnserve",
        "lnserve.errors",
        "lnserve.extras",
        "lnserve.storage",
        "lnserve.hashing",
        "lnserve.input_files",
    } | {a.rsplit(".", k)[0] for a in allowed for k in range(a.count(".") + 1)}
    return sorted(
        m
        for m in loaded
        if m.split(".")[0] == "lnserve" and m not in ok and not any(m.startswith(a + ".") for a in allowed)
    )


def test_models_import_nothing_else_of_lnserve() -> None:
    loaded = _loaded_after_import("lnserve.models", whole_package=True)
    assert _lnserve_outside(loaded, "lnserve.models") == []


def test_converters_import_only_models() -> None:
    loaded = _loaded_after_import("lnserve.converters", whole_package=True)
    assert _lnserve_outside(loaded, "lnserve.converters", "lnserve.models") == []
    assert _offenders(loaded, HTTP) == []


def test_runtime_imports_no_http_layer() -> None:
    """The runtime (graph builder and export included) may use models and converters, never the app's HTTP,
    CLI or serving modules."""
    loaded = _loaded_after_import("lnserve.app.runtime", whole_package=True)
    assert _lnserve_outside(loaded, "lnserve.app.runtime", "lnserve.converters", "lnserve.models") == []
    assert _offenders(loaded, HTTP) == []


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("lnserve.models", ("lnserve.converters", "lnserve.app")),
        ("lnserve.models.encoders", ("lnserve.converters", "lnserve.app")),
        ("lnserve.converters.artifact", ("lnserve.app", "fastapi")),
        # the converters need only the cell names: no torch, so converting a 2 GB table stays lean
        ("lnserve.converters.skip_thoughts", ("lnserve.app", "fastapi", "torch")),
        ("lnserve.converters.order_embedding", ("lnserve.app", "fastapi", "torch")),
        (
            "lnserve.app.runtime.engine",
            ("fastapi", "lnserve.converters.safe_pickle", "lnserve.converters.legacy_files"),
        ),
        # graphs are written with onnx + numpy from the weights alone: no torch, no ORT, no artifact code
        ("lnserve.app.runtime.onnx_graph", ("torch", "onnxruntime", "lnserve.converters", "fastapi")),
        (
            "lnserve.app.runtime.onnx_export",
            ("torch", "fastapi", "lnserve.converters.safe_pickle", "lnserve.converters.legacy_files"),
        ),
        ("lnserve.app.runtime.onnx_backend", ("torch", "fastapi", "lnserve.converters.safe_pickle")),
        # the core install has no extra: the command line and the service load none of their packages
        ("lnserve.app.cli", EXTRA_PACKAGES),
        ("lnserve.app.http.main", EXTRA_PACKAGES),
        ("lnserve.app.runtime.retrieval", EXTRA_PACKAGES),
    ],
)
def test_import_direction(module: str, forbidden: tuple[str, ...]) -> None:
    assert _offenders(_loaded_after_import(module), forbidden) == []


BELOW_APP = ("lnserve.app.demo_model", "lnserve.app.runtime", "lnserve.converters", "lnserve.models")


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("lnserve.app.galleries", ("lnserve.app.galleries", *BELOW_APP)),
        ("lnserve.app.http.schemas", ("lnserve.app.http.schemas", "lnserve.app.galleries", *BELOW_APP)),
        ("lnserve.app.training", ("lnserve.app.training", *BELOW_APP)),
        ("lnserve.app.pull", ("lnserve.app.pull", *BELOW_APP)),
        ("lnserve.app.evaluation", ("lnserve.app.evaluation", *BELOW_APP)),
        ("lnserve.eval", ("lnserve.eval", "lnserve.app.evaluation", *BELOW_APP)),
    ],
)
def test_app_packages_import_only_what_is_below_them(package: str, allowed: tuple[str, ...]) -> None:
    loaded = _loaded_after_import(package, whole_package=True)
    assert _lnserve_outside(loaded, *allowed) == []


def test_gallery_store_and_registry_do_not_import_each_other() -> None:
    """The model identity galleries pin (``ModelRef``) lives in the runtime, so neither needs the other."""
    assert (
        _offenders(_loaded_after_import("lnserve.app.galleries.store"), ("lnserve.app.serving.registry",))
        == []
    )
    assert (
        _offenders(_loaded_after_import("lnserve.app.serving.registry"), ("lnserve.app.galleries.store",))
        == []
    )


PRODUCERS = (
    "lnserve.app.training",
    "lnserve.app.pull",
)  # make artifacts for the CLI; the service never runs them


def test_the_service_loads_no_producer() -> None:
    """Building the service (main, routes, registry, batcher, Ray scale-out) loads no producer."""
    loaded = _loaded_after_import("lnserve.app.http.main")
    for package in ("lnserve.app.http.routes", "lnserve.app.scale"):
        loaded |= _loaded_after_import(package, whole_package=True)
    assert {
        "lnserve.app.serving.registry",
        "lnserve.app.serving.batcher",
        "lnserve.app.http.routes.encode",
    } <= loaded
    assert _offenders(loaded, PRODUCERS) == []


def _producer_imports(path: Path) -> list[tuple[str, str]]:
    """(enclosing function or '<module>', imported module) for each import of a producer in ``path``."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            names: list[str] = []
            if isinstance(child, ast.ImportFrom) and child.module:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            elif isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            found.extend((where, n) for n in names if n.startswith(PRODUCERS) or n in PRODUCERS)
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_service_reaches_training_through_one_small_function_only() -> None:
    """Outside the producers and the CLI, only ``galleries.demo.shipped_demo`` imports training (the demo)."""
    app = Path(lnserve.app.__file__).parent
    cli_side = {"training", "pull", "commands", "cli.py"}
    seen: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(app.rglob("*.py")):
        if path.relative_to(app).parts[0] in cli_side:
            continue
        if hits := _producer_imports(path):
            seen[path.relative_to(app).as_posix()] = hits
    assert seen == {}  # the demo's data: app.demo_model.data


# -- issue 25's rooms: serving never reaches HTTP, the galleries never reach training -----------------------
def test_serving_imports_no_http_layer() -> None:
    """``app/serving`` (registry, batcher, timing, deadlines, errors, the gallery and retrieval flow) imports
    neither FastAPI / Starlette / uvicorn nor ``app.http``."""
    loaded = _loaded_after_import("lnserve.app.serving", whole_package=True)
    assert _offenders(loaded, (*HTTP, "lnserve.app.http")) == []
    assert _offenders(loaded, PRODUCERS) == []
    # type-only imports too: the serving code has no HTTP types, not even under TYPE_CHECKING
    serving = Path(lnserve.app.__file__).parent / "serving"
    mentions = [p.name for p in serving.rglob("*.py") if "lnserve.app.http" in p.read_text(encoding="utf-8")]
    assert mentions == []


def test_the_root_error_tree_imports_nothing_of_lnserve() -> None:
    loaded = _loaded_after_import("lnserve.errors")
    assert _lnserve_outside(loaded, "lnserve.errors") == []


def test_galleries_never_import_training() -> None:
    """The demo's data comes from ``app.demo_model.data``; the gallery package loads no producer."""
    loaded = _loaded_after_import("lnserve.app.galleries", whole_package=True)
    assert _offenders(loaded, PRODUCERS) == []
