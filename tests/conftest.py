"""Shared fixtures: paths to the copied legacy fixtures, converted artifacts built once per session,
and a helper that runs the real ``lnserve`` CLI in a subprocess."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from lnserve.converters.skip_thoughts import convert_skip_thoughts

LEGACY = Path(__file__).parent / "fixtures" / "legacy"
OE_MODELS = ("oe_order_gru", "oe_symmetric_gru", "oe_order_lngru", "oe_order_rlngru", "oe_order_rms_as_lngru")
ST_VARIANTS = ("skipthoughts_gru", "skipthoughts_lngru")


def _policy_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop set as current for this thread, without creating one (as ``get_event_loop`` would)."""
    local = getattr(asyncio.get_event_loop_policy(), "_local", None)
    return getattr(local, "_loop", None)


@pytest.fixture(autouse=True)
def _close_implicit_event_loop() -> Iterator[None]:
    """A library that calls ``asyncio.get_event_loop()`` outside a loop (litellm's sync ``embedding`` does)
    gets a new loop set as current, with a socket pair for its wake-ups. The next ``asyncio.run`` unsets it,
    and whichever test runs when the garbage collector finds it fails on its "unclosed socket"
    ResourceWarning. The test that made the loop closes it instead."""
    before = _policy_loop()
    yield
    loop = _policy_loop()
    if loop is not None and loop is not before and not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)


def inputs() -> dict[str, Any]:
    return json.loads((LEGACY / "inputs.json").read_text(encoding="utf-8"))


def golden(name: str) -> dict[str, np.ndarray]:
    with np.load(LEGACY / "golden" / f"{name}.npz") as g:
        return {k: g[k] for k in g.files}


def run_cli(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a fresh interpreter, isolated (``-I``) so that only the installed
    ``lnserve`` package is importable, never the checkout's folders as top-level ``app`` / ``models``."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"lnserve {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every public fixture converted once through the Python API."""
    root = tmp_path_factory.mktemp("artifacts")
    out: dict[str, Path] = {}
    for name in OE_MODELS:
        model = read_order_embedding(LEGACY / "order_embedding" / name)
        write_order_embedding(model, root / name, name=name)
        out[name] = root / name
    for variant in ST_VARIANTS:
        src = LEGACY / variant
        convert_skip_thoughts(
            uni=src / "uni_skip.npz", bi=src / "bi_skip.npz", tables=src, out=root / variant, name=variant
        )
        out[variant] = root / variant
    return out
