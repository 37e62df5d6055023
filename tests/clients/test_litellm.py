"""litellm's ``embedding`` through its OpenAI provider (``openai/<model>`` with ``api_base``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import numpy as np
import pytest

from tests.clients.conftest import SENTENCES, encode
from tests.e2e.server import LiveServer

litellm = pytest.importorskip("litellm", reason="litellm is a dev dependency")
# litellm's own pydantic models warn about ReadOnly TypedDict items when first built: not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:Items? .*ReadOnly:UserWarning")


@pytest.fixture(autouse=True)
def _close_litellm_clients() -> Iterator[None]:
    """litellm keeps the OpenAI clients it made (and their open connections to our server) in a module-level
    cache; closed here, not by whichever later test's garbage collection meets their sockets."""
    yield
    cache = litellm.in_memory_llm_clients_cache
    for client in list(cache.cache_dict.values()):
        close = getattr(client, "close", None)
        if callable(close) and not inspect.iscoroutinefunction(close):  # async ones hold no connection here
            close()
    cache.flush_cache()


def test_embedding(v1: str, server: LiveServer) -> None:
    out = litellm.embedding(model="openai/demo-lngru", input=SENTENCES, api_base=v1, api_key="unused")
    got = np.asarray([d["embedding"] for d in out.data], dtype=np.float32)
    np.testing.assert_allclose(got, encode(server, SENTENCES), atol=1e-6)
