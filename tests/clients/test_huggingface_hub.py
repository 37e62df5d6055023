"""huggingface_hub's ``InferenceClient(base_url=...)``: feature_extraction and sentence_similarity speak
TEI to ``POST /``."""

from __future__ import annotations

import numpy as np
import pytest

from tests.clients.conftest import SENTENCES, encode
from tests.e2e.server import LiveServer

hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is a dev dependency")


@pytest.fixture
def client(server: LiveServer) -> hub.InferenceClient:
    return hub.InferenceClient(base_url=server.url, timeout=30)


def test_feature_extraction_equals_encode(client: hub.InferenceClient, server: LiveServer) -> None:
    got = client.feature_extraction(SENTENCES[0])
    assert got.shape == (1, 64)
    np.testing.assert_allclose(got[0], encode(server, SENTENCES[:1], normalize=True)[0], atol=1e-6)
    raw = client.feature_extraction(SENTENCES[0], normalize=False)
    np.testing.assert_allclose(raw[0], encode(server, SENTENCES[:1], normalize=False)[0], atol=1e-6)


def test_sentence_similarity_is_cosine(client: hub.InferenceClient, server: LiveServer) -> None:
    sims = client.sentence_similarity(SENTENCES[0], other_sentences=SENTENCES)
    vecs = encode(server, SENTENCES, normalize=True)
    assert isinstance(sims, list) and len(sims) == 3
    np.testing.assert_allclose(sims, vecs @ vecs[0], atol=1e-5)
    assert sims[0] == pytest.approx(1.0, abs=1e-5) and max(sims[1:]) < 0.999


def test_errors_reach_the_client(client: hub.InferenceClient) -> None:
    with pytest.raises(hub.errors.HfHubHTTPError) as err:
        client.feature_extraction(" ".join(["red"] * 300))  # over max_tokens: TEI's 413
    assert err.value.response.status_code == 413
    assert err.value.response.json()["error"]["code"] == "sentence_too_long"
    vec = client.feature_extraction(" ".join(["red"] * 300), truncate=True)
    assert vec.shape == (1, 64)
