"""Request and response bodies of ``/tokenize`` and ``/score`` (kept apart from ``app.schemas``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, PrivateAttr, model_validator

from .counted import Counted
from .fields import DEMO_IMAGE, Eos, ModelName, Pretokenized
from .tei import TEITokenizeRequest


# -- /tokenize -------------------------------------------------------------------------------------
class TokenizeRequest(Counted, BaseModel):
    """lnserve's body; a body with ``inputs`` (and no ``sentences``) is TEI's (``TEITokenizeRequest``),
    validated by TEI's rules and answered in TEI's shape, so that TEI clients work at ``POST /tokenize``."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"sentences": ["a red circle on the left"]}]}
    )

    model: str | None = ModelName
    sentences: list[str] = Field(
        min_length=1, description="Sentences to tokenise, in order; at most max_sentences (see /info)."
    )
    pretokenized: bool = Pretokenized
    eos: bool | None = Eos
    truncate: bool = Field(
        False, description="Cut sentences over max_tokens (as /encode does) instead of refusing them."
    )
    _tei: TEITokenizeRequest | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _either_shape(cls, data: Any, handler: ModelWrapValidatorHandler[TokenizeRequest]) -> TokenizeRequest:
        """Told apart by field: ``inputs`` without ``sentences`` is TEI's body."""
        if not (isinstance(data, dict) and "inputs" in data and "sentences" not in data):
            return handler(data)
        tei = TEITokenizeRequest.model_validate(data)
        texts = [tei.inputs] if isinstance(tei.inputs, str) else tei.inputs
        body = cls.model_construct(sentences=texts, eos=None if tei.add_special_tokens else False)
        body._tei = tei
        return body

    @property
    def tei(self) -> TEITokenizeRequest | None:
        """TEI's body when the request came in TEI's shape (answered in TEI's shape)."""
        return self._tei

    def item_count(self) -> int:
        return len(self.sentences)


class Token(BaseModel):
    token: str = Field(description="The token as looked up (after the tokenizer: e.g. lowercased).")
    id: int = Field(description="Its vocabulary id (order-embedding) or word-table row (skip-thoughts).")
    unknown: bool = Field(description="Not in the model's vocabulary: it takes the one UNK vector.")
    source: Literal["model", "expansion", "unk"] | None = Field(
        None,
        description="Where its vector comes from: the model's own vocabulary, the vocabulary expansion "
        "(word2vec rows), or the UNK vector; null where the model's word table does not record it.",
    )


class TokenizedSentence(BaseModel):
    tokens: list[Token]
    token_count: int = Field(description="Steps /encode runs for this sentence (eos included).")
    unk_count: int = Field(description="Of those, unknown tokens (as /encode's unk_counts).")


class TokenizeResponse(BaseModel):
    model: str
    tokenizer: str = Field(description="coco, treebank or whitespace (pretokenized).")
    eos: bool
    unk_id: int | None = Field(description="The id unknown words map to (null: the model has none).")
    sentences: list[TokenizedSentence]


# -- /score ----------------------------------------------------------------------------------------
class ScoreRequest(Counted, BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"captions": ["a red circle on the left"], "images": [DEMO_IMAGE]}]},
    )

    model: str | None = ModelName
    captions: list[str] = Field(
        min_length=1, description="Captions (text), encoded with the model's defaults."
    )
    images: list[list[float]] = Field(min_length=1, description="CNN feature rows (M x dim_image).")
    pretokenized: bool = Field(
        False, description="Split captions on whitespace only, as the original code did."
    )
    truncate: bool = Field(False, description="Cut captions over max_tokens instead of refusing them.")

    count_label: ClassVar[str] = "captions or images"

    def item_count(self) -> int:
        return max(len(self.captions), len(self.images))


class ScoreMeaning(BaseModel):
    metric: str = Field(description="order_violation or negative_cosine: the model's own error.")
    direction: str
    meaning: str


class ScoreResponse(BaseModel):
    model: str
    score: ScoreMeaning
    scores: list[list[float]] = Field(
        description="N x M: scores[i][j] is the error of caption i against image j (as `lnserve score`)."
    )
