"""Request and response bodies. Responses with vectors are rendered by orjson straight from numpy."""

from __future__ import annotations

import base64
from typing import Any, Literal

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.responses import JSONResponse

from ...runtime.precisions import Precision
from .counted import Counted, items_in
from .fields import DEMO_IMAGE, Eos, ModelName, Pretokenized
from .retrieval import GallerySummary

Encoding = Literal["float", "base64"]


class VectorJSONResponse(JSONResponse):
    """JSON via orjson, numpy arrays serialised natively (a 4800-d vector per row stays cheap)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def encode_vectors(vectors: np.ndarray, encoding: str) -> np.ndarray | list[str]:
    """``float``: the array itself (orjson writes it); ``base64``: little-endian float32 bytes per row."""
    if encoding == "float":
        return np.ascontiguousarray(vectors, dtype=np.float32)
    le = np.ascontiguousarray(vectors, dtype="<f4")
    return [base64.b64encode(row.tobytes()).decode("ascii") for row in le]


# -- errors ----------------------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. model_not_found, queue_full.")
    message: str
    request_id: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


NORMALIZE = (
    "true: the model's sentence vector: L2-normalised, then the absolute value on order-embedding "
    "models trained with abs (skip-thoughts: uni and bi halves normalised separately). false: the "
    "encoder's raw last state, before both (no L2, no abs), as /embed_all's last row."
)


# -- /encode ---------------------------------------------------------------------------------------
class EncodeRequest(Counted, BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"sentences": ["a red circle on the left", "a blue square"]}]},
    )

    model: str | None = ModelName
    sentences: list[str] = Field(min_length=1, description="Sentences to encode, in order.")
    pretokenized: bool = Pretokenized
    normalize: bool | None = Field(
        None,
        description=NORMALIZE + " Default: the model's.",
    )
    eos: bool | None = Eos
    truncate: bool = Field(False, description="Cut sentences over max_tokens instead of refusing them.")
    encoding: Encoding = Field("float", description="base64: little-endian float32 per vector.")

    def item_count(self) -> int:
        return len(self.sentences)


class EncodeResponse(BaseModel):
    model: str
    dim: int
    encoding: Encoding
    vectors: list[list[float]] | list[str]
    token_counts: list[int] = Field(description="Steps run per sentence, eos included.")
    unk_counts: list[int] = Field(
        description="Of those, tokens the model does not know (mapped to UNK): a sentence made mostly of "
        "them gets a near-arbitrary vector."
    )


class EncodeImagesRequest(Counted, BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"features": [DEMO_IMAGE]}]})

    model: str | None = ModelName
    features: list[list[float]] = Field(min_length=1, description="CNN feature rows (N x dim_image).")
    encoding: Encoding = "float"

    def item_count(self) -> int:
        return len(self.features)


class EncodeImagesResponse(BaseModel):
    model: str
    dim: int
    encoding: Encoding
    vectors: list[list[float]] | list[str]


# -- /v1/embeddings (OpenAI-compatible) ------------------------------------------------------------
class EmbeddingsRequest(Counted, BaseModel):
    model_config = ConfigDict(  # OpenAI clients send fields we have no use for
        extra="ignore", json_schema_extra={"examples": [{"input": "a red circle on the left"}]}
    )

    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="A string or a list of strings. Token ids (a list of ints, or of lists of ints) are "
        "refused with 422 token_ids_unsupported: the models have their own vocabularies."
    )
    model: str | None = ModelName
    encoding_format: Encoding = "float"
    dimensions: StrictInt | None = Field(None, description="Must equal the model's dimension if given.")
    user: str | None = None

    def item_count(self) -> int:
        return items_in(self.input)


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: Usage


class OpenAIModel(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "lnserve"


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]


# -- models, info, health --------------------------------------------------------------------------
class ModelInfo(BaseModel):
    name: str
    default: bool
    state: Literal["pending", "loading", "ready", "failed"]
    family: str | None
    cells: dict[str, str | None] = Field(description="Cell type per recurrent part.")
    dim: int | None
    dim_image: int | None
    tokenizer: str | None
    defaults: dict[str, bool]
    demo: bool
    backend: str
    providers: list[str] = Field(description="Execution providers actually in use.")
    precision: Precision = Field("fp32", description="The precision profile served (docs/precision.md).")
    graph: Literal["plain", "fused"] | None = Field(
        None,
        description="onnx backend: fused (the lngru / rlngru step's norms and gates as one custom op) or "
        "plain (standard ONNX ops); null: torch backend or loading.",
    )
    sha256: str | None = Field(
        None, description="sha256 of the served version's manifest.json (null: loading)."
    )
    identity: str | None = Field(None, description="Model identity (what galleries pin; null: loading).")
    loaded_at: str | None = Field(None, description="When the served version turned ready (UTC, ISO 8601).")


class ModelList(BaseModel):
    default: str | None
    models: list[ModelInfo]


class EngineInfo(BaseModel):
    """Where the service runs: one process (``lnserve serve``) or Ray Serve (``lnserve serve --ray``)."""

    model_config = ConfigDict(extra="allow")  # Ray adds autoscaling bounds, the GPUs per replica, the pid

    name: Literal["process", "ray"]
    replicas: int | None = Field(description="Serving processes (Ray: the deployment's replicas now).")
    shards: int = Field(description="Gallery shards (1: one store).")
    replica: str | None = Field(None, description="Ray: the replica that answered this request.")


class Info(BaseModel):
    version: str
    backend: str
    precision: Precision = Field("fp32", description="The precision profile set (docs/precision.md).")
    engine: EngineInfo
    ready: bool
    default_model: str | None
    models: list[ModelInfo]
    galleries: list[GallerySummary] = Field(description="Retrieval galleries (see GET /galleries).")
    limits: dict[str, int | float]
    # text-embeddings-inference's /info fields (TEI serves one model: here, the default one)
    model_id: str | None = Field(None, description="TEI: the model the TEI routes answer with (the default).")
    model_sha: str | None = Field(None, description="TEI: sha256 of that model's manifest.json.")
    model_dtype: str | None = Field(
        None, description="TEI: float32, float16, bfloat16 or int8 (the default model's precision)."
    )
    model_type: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {"embedding": {"pooling": "last"}},
        description="TEI: an embedding model; the vector is the recurrent encoder's last state.",
    )
    max_concurrent_requests: int | None = Field(None, description="TEI: max_inflight.")
    max_input_length: int | None = Field(None, description="TEI: max_tokens.")
    max_batch_tokens: int | None = Field(None, description="TEI: max_batch_tokens.")
    max_batch_requests: int | None = Field(None, description="TEI: max_batch_size.")
    max_client_batch_size: int | None = Field(None, description="TEI: max_sentences.")
    auto_truncate: bool = Field(
        False, description="TEI: inputs over max_input_length are refused unless truncate."
    )
    tokenization_workers: int = 1


class Health(BaseModel):
    status: Literal["ok", "failed"] = Field(
        "ok", description="failed (HTTP 503): a model failed at run time; restart the process."
    )
    errors: dict[str, str] | None = Field(None, description="Why, per failed model (only when failed).")


class Readiness(BaseModel):
    ready: bool
    models: dict[str, str] = Field(description="State per model: pending, loading, ready or failed.")
    errors: dict[str, str] = Field(default_factory=dict)
