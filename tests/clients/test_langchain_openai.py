"""langchain-openai's ``OpenAIEmbeddings``: with its defaults it sends token ids and gets the clear 422 naming
the fix; with ``check_embedding_ctx_length=False`` (the documented option) it sends text and works.

tiktoken downloads its BPE files from the internet the first time; tests have none, so the encoding langchain
falls back to for a model tiktoken does not know (``cl100k_base``) is registered here as a byte-level one:
langchain then sends byte ids (``[[97, 32, ...]]``), exactly what it sends with the real file (other ids).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.clients.conftest import SENTENCES, encode
from tests.e2e.server import LiveServer

lc = pytest.importorskip("langchain_openai", reason="langchain-openai is a dev dependency")
openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
tiktoken = pytest.importorskip("tiktoken", reason="langchain-openai's tokenizer")


@pytest.fixture
def offline_cl100k() -> Iterator[None]:
    from tiktoken import registry

    registry.ENCODINGS["cl100k_base"] = tiktoken.Encoding(
        name="cl100k_base",
        pat_str=r"""\S+|\s+""",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    yield
    registry.ENCODINGS.pop("cl100k_base", None)


def test_defaults_send_token_ids_and_get_the_fix(v1: str, offline_cl100k: None) -> None:
    emb = lc.OpenAIEmbeddings(model="demo-lngru", base_url=v1, api_key="unused", max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        emb.embed_documents(SENTENCES)
    assert err.value.body["code"] == "token_ids_unsupported"
    assert "check_embedding_ctx_length=False" in err.value.body["message"]


def test_documented_option_works(v1: str, server: LiveServer) -> None:
    emb = lc.OpenAIEmbeddings(
        model="demo-lngru", base_url=v1, api_key="unused", max_retries=0, check_embedding_ctx_length=False
    )
    got = np.asarray(emb.embed_documents(SENTENCES), dtype=np.float32)
    np.testing.assert_allclose(got, encode(server, SENTENCES), atol=1e-6)
    np.testing.assert_allclose(emb.embed_query(SENTENCES[1]), got[1], atol=1e-6)
