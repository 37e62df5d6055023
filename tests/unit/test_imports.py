"""Imports follow the data flow (models <- converters <- runtime <- app): each module is imported in a fresh
interpreter and ``sys.modules`` is inspected, so a stray import anywhere in the chain shows up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HTTP = ("fastapi", "starlette", "uvicorn")


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
    ok = {"lnserve"} | {a.rsplit(".", k)[0] for a in allowed for k in range(a.count(".") + 1)}
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
    ],
)
def test_import_direction(module: str, forbidden: tuple[str, ...]) -> None:
    assert _offenders(_loaded_after_import(module), forbidden) == []
