"""``lnserve.eval.senteval`` called as SentEval calls it (SentEval itself is not installed): ``prepare``
once with the task's samples, then ``batcher`` per batch of token lists, over a local artifact and over a
real server on loopback; both give the vectors ``Engine`` gives for the joined sentences."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.demo_model.data import ensure_demo_artifact
from lnserve.app.runtime.engine import Engine
from lnserve.eval.senteval import batcher, prepare
from tests.e2e.server import LiveServer, start_server

BATCHES = [[["a", "red", "circle", "on", "the", "left"], ["two", "blue", "squares"]], [[], ["a", "star"]]]


class DotDict(dict):
    """SentEval's ``utils.dotdict``: items readable as attributes."""

    __getattr__ = dict.get
    __setattr__ = dict.__setitem__  # type: ignore[assignment]


def _expected(eos: bool | None) -> np.ndarray:
    engine = Engine.open(ensure_demo_artifact())
    sentences = [" ".join(t) if t else "." for batch in BATCHES for t in batch]
    # '.' has no token for the demo's tokenizer: with eos off it is encoded as <eos> alone
    return np.vstack([engine.encode_sentences([s], eos=True if s == "." else eos) for s in sentences])


def _run(params: DotDict) -> np.ndarray:
    prepare(params, [t for batch in BATCHES for t in batch])
    return np.vstack([batcher(params, batch) for batch in BATCHES])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("srv"))
    yield live
    live.stop()


@pytest.mark.parametrize("eos", [None, False])
def test_local_model(eos: bool | None) -> None:
    params = DotDict(task_path="data", usepytorch=True, kfold=10, lnserve_model=str(ensure_demo_artifact()))
    if eos is not None:
        params["lnserve_eos"] = eos
    got = _run(params)
    assert got.shape == (4, 64) and got.dtype == np.float32
    assert np.abs(got - _expected(eos)).max() <= 1e-5


def test_running_server(server: LiveServer) -> None:
    got = _run(DotDict(lnserve_url=server.url))  # the server's default model: the demo
    assert np.abs(got - _expected(None)).max() <= 1e-5


def test_prepare_needs_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        prepare(DotDict(), [])
    with pytest.raises(ValueError, match="exactly one"):
        prepare(DotDict(lnserve_model=str(tmp_path), lnserve_url="http://127.0.0.1:1"), [])
