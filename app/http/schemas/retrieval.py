"""Request and response bodies of the gallery and retrieval routes (``/galleries``, ``/retrieve``).

Kept apart from ``lnserve.app.http.schemas.encode`` because these describe stored items and ranked results;
both modules share the conventions: ``extra="forbid"`` on requests, limits stated in the schema where static.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from ...galleries.layout import KINDS, MAX_K, MAX_QUERIES
from ...galleries.rules import GALLERY_NAME_PATTERN, GALLERY_NAME_RULE
from .counted import Counted

GalleryKind = Literal["images", "captions"]
assert set(GalleryKind.__args__) == set(KINDS)  # type: ignore[attr-defined]  # one list of kinds
# pydantic's (Rust) regex: ``$`` is the end of the text, never before a trailing newline
GALLERY_NAME = f"^{GALLERY_NAME_PATTERN}$"
ModelField = Field(
    None, description="Model name (see GET /models); must be the gallery's model. Default: the gallery's."
)


# -- galleries -------------------------------------------------------------------------------------
class ScoreInfo(BaseModel):
    metric: Literal["order_violation", "negative_cosine", "cosine"]
    direction: Literal["lower_is_better", "higher_is_better"]
    meaning: str


class GalleryCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "my-captions", "kind": "captions"}]}
    )

    name: str = Field(pattern=GALLERY_NAME, description=f"Gallery name: {GALLERY_NAME_RULE}.")
    kind: GalleryKind = Field(description="What the items are: images (features) or captions (text).")
    model: str | None = Field(None, description="Model that embeds the items (default: the default model).")


IDENTITY_DOC = (
    "The model's identity (sha256 over its weights, vocabulary, cell and options): queries must come from "
    "a model with the same one. null: a gallery made before identities, still pinned by model_sha256."
)


class GalleryOut(BaseModel):
    name: str
    state: Literal["ok"] = Field("ok", description="ok: servable (see CorruptGalleryOut).")
    reason: None = None
    kind: GalleryKind
    count: int = Field(description="Live items.")
    dim: int
    model: str
    model_identity: str | None = Field(description=IDENTITY_DOC)
    model_sha256: str = Field(description="sha256 of the model's manifest.json when the gallery was made.")
    family: str
    method: str
    metric: str
    score: ScoreInfo
    created_at: float
    uid: str


class CorruptGalleryOut(BaseModel):
    """A quarantined gallery: its files are damaged; every use answers 503 ``gallery_corrupt`` until it is
    repaired (``lnserve gallery repair``) or removed. Fields its database can no longer tell are null."""

    name: str
    state: Literal["corrupt"]
    reason: str = Field(description="What is damaged.")
    kind: GalleryKind | None = None
    count: int | None = None
    dim: int | None = None
    model: str | None = None
    model_identity: str | None = None
    model_sha256: str | None = None
    family: str | None = None
    method: str | None = None
    metric: str | None = None
    score: ScoreInfo | None = None
    created_at: float | None = None
    uid: str | None = None


class GalleryList(BaseModel):
    galleries: list[Annotated[GalleryOut | CorruptGalleryOut, Field(discriminator="state")]]


class GallerySummary(BaseModel):
    """One line of ``/info``; a quarantined gallery has state ``corrupt``, a reason, and nulls for what its
    database can no longer tell."""

    name: str
    state: Literal["ok", "corrupt"]
    reason: str | None = None
    kind: GalleryKind | None
    model: str | None
    count: int | None
    metric: str | None


class ItemIn(BaseModel):
    """Exactly one of ``text`` (captions galleries) or ``image`` (images galleries)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, min_length=1, max_length=256, description="Default: a random hex id.")
    text: str | None = Field(None, description="A caption, encoded with the gallery's model.")
    image: list[float] | None = Field(None, description="CNN features (dim_image), encoded server-side.")
    payload: Any = Field(None, description="Any JSON value, returned with hits (captions default: {text}).")

    @model_validator(mode="after")
    def _one_input(self) -> ItemIn:
        if (self.text is None) == (self.image is None):
            raise ValueError("give exactly one of text and image")
        return self


class ItemsAdd(Counted, BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"id": "c1", "text": "a red circle on the left"},
                        {"id": "c2", "text": "a blue square"},
                    ]
                }
            ]
        },
    )

    model: str | None = ModelField
    items: list[ItemIn] = Field(min_length=1, description="At most max_sentences items (see /info).")
    pretokenized: bool = Field(False, description="Split captions on whitespace only, as the original code.")
    truncate: bool = Field(False, description="Cut captions over max_tokens instead of refusing them.")

    def item_count(self) -> int:
        return len(self.items)


class ItemsAdded(BaseModel):
    gallery: str
    ids: list[str] = Field(description="Ids of the added items, in order; durable once this is returned.")
    count: int = Field(description="Live items in the gallery now.")


class ItemOut(BaseModel):
    id: str
    payload: Any


# -- retrieval -------------------------------------------------------------------------------------
class TextQuery(BaseModel):
    """A caption: retrieves images (images gallery) or captions (captions gallery)."""

    model_config = ConfigDict(extra="forbid")
    text: str


class ImageQuery(BaseModel):
    """CNN image features (dim_image), encoded server-side: retrieves captions."""

    model_config = ConfigDict(extra="forbid")
    image: list[float] = Field(min_length=1)


class IdQuery(BaseModel):
    """A stored item's vector as the query (no encoding); from ``gallery`` (default: the searched one)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=256)
    gallery: str | None = Field(None, description="Gallery holding the item (same model required).")


Query = TextQuery | ImageQuery | IdQuery


class RetrieveRequest(Counted, BaseModel):
    """Exactly one of ``query`` (one query; ``results`` is one list) and ``queries`` (a batch; ``results``
    is one list per query, in order)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"gallery": "demo-images", "query": {"text": "a red circle on the left"}, "k": 5}]
        },
    )

    model: str | None = ModelField
    gallery: str = Field(description="Gallery to search.")
    query: Query | None = Field(None, description='{"text": ...} | {"image": [floats]} | {"id": ...}')
    queries: list[Query] | None = Field(
        None,
        min_length=1,
        max_length=MAX_QUERIES,
        description="Batch of queries (each as `query`); at most max_sentences (see /info).",
    )
    k: StrictInt = Field(10, ge=1, le=MAX_K, description="Results per query (fewer if the gallery is small).")
    pretokenized: bool = Field(False, description="Split text queries on whitespace only.")
    truncate: bool = Field(False, description="Cut text queries over max_tokens instead of refusing them.")

    @model_validator(mode="after")
    def _one_form(self) -> RetrieveRequest:
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of query and queries")
        return self

    count_label: ClassVar[str] = "queries"

    def query_list(self) -> list[Query]:
        return [self.query] if self.query is not None else list(self.queries or [])

    def item_count(self) -> int:
        return len(self.query_list())


class Hit(BaseModel):
    id: str
    score: float = Field(description="In the units of `score.metric`; see `score.direction`.")
    payload: Any


class RetrieveResponse(BaseModel):
    gallery: str
    model: str
    score: ScoreInfo = Field(description="What the scores mean and whether lower or higher is better.")
    results: list[Hit] | list[list[Hit]] = Field(
        description="Best first. `query`: one list of hits; `queries`: one list per query, in order."
    )
