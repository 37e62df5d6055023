"""The engines the shared HTTP suites run against: one process (``lnserve serve``) and Ray Serve
(``lnserve serve --ray``, 2 replicas, 2 gallery shards, a local Ray instance on 127.0.0.1)."""

from __future__ import annotations

import importlib.util

import pytest

RAY_ARGS = ("--ray", "--replicas", "2", "--shards", "2")
HAVE_RAY = importlib.util.find_spec("ray") is not None
ENGINES = [
    "process",
    pytest.param(
        "ray",
        marks=[
            pytest.mark.ray,
            pytest.mark.skipif(not HAVE_RAY, reason="needs the ray extra (lnserve[ray])"),
        ],
    ),
]


def engine_args(engine: str) -> tuple[str, ...]:
    """``lnserve serve`` arguments for the engine."""
    return RAY_ARGS if engine == "ray" else ()


def start_timeout(engine: str) -> float:
    """Ray starts, then each replica loads every model: allow for it on 2 busy cores."""
    return 420.0 if engine == "ray" else 120.0
