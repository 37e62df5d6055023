"""llama-index's ``OpenAILikeEmbedding`` (any OpenAI-compatible server)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.clients.conftest import SENTENCES, encode
from tests.e2e.server import LiveServer

openai_like = pytest.importorskip(
    "llama_index.embeddings.openai_like", reason="llama-index-embeddings-openai-like is a dev dependency"
)


def test_openai_like_embedding(v1: str, server: LiveServer) -> None:
    emb = openai_like.OpenAILikeEmbedding(
        model_name="demo-lngru", api_base=v1, api_key="unused", max_retries=0
    )
    expected = encode(server, SENTENCES)
    np.testing.assert_allclose(emb.get_text_embedding(SENTENCES[0]), expected[0], atol=1e-6)
    batch = np.asarray(emb.get_text_embedding_batch(SENTENCES), dtype=np.float32)
    np.testing.assert_allclose(batch, expected, atol=1e-6)
