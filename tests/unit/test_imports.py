"""Imports follow the data flow (models <- converters <- runtime <- app): each module is imported in a fresh
interpreter and ``sys.modules`` is inspected, so a stray import anywhere in the chain shows up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _loaded_after_import(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(proc.stdout))


def _offenders(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("models", ("converters", "app")),
        ("lnserve.models.encoders", ("converters", "app")),
        ("lnserve.converters.artifact", ("app", "fastapi")),
        # the converters need only the cell names: no torch, so converting a 2 GB table stays lean
        ("lnserve.converters.skip_thoughts", ("app", "fastapi", "torch")),
        ("lnserve.converters.order_embedding", ("app", "fastapi", "torch")),
        (
            "lnserve.app.runtime.engine",
            ("fastapi", "lnserve.converters.safe_pickle", "lnserve.converters.legacy_files"),
        ),
    ],
)
def test_import_direction(module: str, forbidden: tuple[str, ...]) -> None:
    assert _offenders(_loaded_after_import(module), forbidden) == []
