"""The openai SDK: embeddings.create (float, base64, dimensions), models.list and models.retrieve."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.clients.conftest import ALIAS, SENTENCES, encode
from tests.e2e.server import LiveServer

openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")


@pytest.fixture
def client(v1: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=v1, api_key="unused", max_retries=0, timeout=30)


def test_embeddings_create_equals_encode(client: openai.OpenAI, server: LiveServer) -> None:
    expected = encode(server, SENTENCES)
    out = client.embeddings.create(model="demo-lngru", input=SENTENCES)  # the SDK asks for base64, decodes
    np.testing.assert_allclose(np.asarray([d.embedding for d in out.data]), expected, atol=1e-6)
    out = client.embeddings.create(model="demo-lngru", input=SENTENCES, encoding_format="float")
    np.testing.assert_allclose(np.asarray([d.embedding for d in out.data]), expected, atol=1e-6)
    assert [d.index for d in out.data] == [0, 1, 2]
    out = client.embeddings.create(model="demo-lngru", input=SENTENCES, encoding_format="base64")
    raw = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in out.data]  # asked: left as is
    np.testing.assert_array_equal(np.asarray(raw), expected)
    assert out.usage.prompt_tokens > 0


def test_dimensions_only_the_models_own(client: openai.OpenAI) -> None:
    out = client.embeddings.create(model="demo-lngru", input="a red circle", dimensions=64)
    assert len(out.data[0].embedding) == 64
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.embeddings.create(model="demo-lngru", input="a red circle", dimensions=32)
    assert err.value.body["code"] == "invalid_input"


def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["demo-lngru", ALIAS]
    model = client.models.retrieve("demo-lngru")
    assert (model.id, model.object, model.owned_by) == ("demo-lngru", "model", "lnserve")
    assert client.models.retrieve(ALIAS).id == ALIAS
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("text-embedding-3-small")
    assert err.value.body["code"] == "model_not_found"


def test_alias_answers_as_the_model(client: openai.OpenAI, server: LiveServer) -> None:
    out = client.embeddings.create(model=ALIAS, input=SENTENCES[:1])
    np.testing.assert_allclose(np.asarray(out.data[0].embedding), encode(server, SENTENCES[:1])[0], atol=1e-6)


def test_token_ids_get_the_clear_422(client: openai.OpenAI) -> None:
    for ids in ([[97, 32, 114]], [97, 32, 114]):
        with pytest.raises(openai.UnprocessableEntityError) as err:
            client.embeddings.create(model="demo-lngru", input=ids)
        assert err.value.body["code"] == "token_ids_unsupported"
        assert "check_embedding_ctx_length=False" in err.value.body["message"]
