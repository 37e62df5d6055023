"""The engines the shared HTTP suites run against: one process (``lnserve serve``) and Ray Serve
(``lnserve serve --ray``, 2 replicas, 2 gallery shards, a local Ray instance on 127.0.0.1); the retrieval
suite also runs on ``ray-cluster``: the same through ``--address`` on a two-raylet token-auth cluster
(``tests.e2e.ray_cluster``)."""

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


RAY_CLUSTER = pytest.param(
    "ray-cluster",
    marks=[pytest.mark.ray, pytest.mark.skipif(not HAVE_RAY, reason="needs the ray extra (lnserve[ray])")],
)


def engine_args(engine: str) -> tuple[str, ...]:
    """``lnserve serve`` arguments for the engine (``ray-cluster`` adds its ``--address``)."""
    return RAY_ARGS if engine in ("ray", "ray-cluster") else ()


def start_timeout(engine: str) -> float:
    """Ray starts, then each replica loads every model: allow for it on 2 busy cores."""
    return 420.0 if engine in ("ray", "ray-cluster") else 120.0
