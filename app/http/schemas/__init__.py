"""Request and response bodies of the HTTP API, one module per group of routes.

``encode``: /encode, /v1/embeddings, /models, /info, /health, /ready and the error body (re-exported here);
``retrieval``: /galleries and /retrieve. Requests use ``extra="forbid"``; limits are stated where static.
"""

from .encode import (
    EmbeddingItem,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EncodeImagesRequest,
    EncodeImagesResponse,
    EncodeRequest,
    EncodeResponse,
    Encoding,
    EngineInfo,
    ErrorBody,
    ErrorDetail,
    Health,
    Info,
    ModelInfo,
    ModelList,
    ModelName,
    OpenAIModel,
    OpenAIModelList,
    Readiness,
    Usage,
    VectorJSONResponse,
    encode_vectors,
)

__all__ = [
    "EmbeddingItem",
    "EmbeddingsRequest",
    "EmbeddingsResponse",
    "EncodeImagesRequest",
    "EncodeImagesResponse",
    "EncodeRequest",
    "EncodeResponse",
    "Encoding",
    "EngineInfo",
    "ErrorBody",
    "ErrorDetail",
    "Health",
    "Info",
    "ModelInfo",
    "ModelList",
    "ModelName",
    "OpenAIModel",
    "OpenAIModelList",
    "Readiness",
    "Usage",
    "VectorJSONResponse",
    "encode_vectors",
]
