"""Request and response bodies of the text-embeddings-inference (TEI) protocol: ``/embed``, ``/similarity``,
``POST /``, ``/embed_all``, ``/decode`` and ``/tei/tokenize`` (also accepted at ``POST /tokenize``).
Unknown fields are ignored, as TEI does, so its clients work unchanged."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, StrictInt

from .counted import Counted, items_in
from .encode import NORMALIZE

Inputs = str | list[str] | list[int] | list[list[int]]


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


# TEI spells them Left / Right; huggingface_hub sends left / right
TruncationDirection = Annotated[Literal["left", "right"], BeforeValidator(_lower)]


class _TEIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    truncate: bool | None = Field(
        None, description="Cut inputs over max_tokens instead of refusing them (413); default false."
    )
    truncation_direction: TruncationDirection = Field(
        "right", description="right: keep the first tokens; left: keep the last ones."
    )
    prompt_name: str | None = Field(None, description="Not supported (the models have no prompts): 422.")


class TEIEmbedRequest(Counted, _TEIRequest):
    model_config = ConfigDict(json_schema_extra={"examples": [{"inputs": ["a red circle", "a blue square"]}]})

    inputs: Inputs = Field(description="A string or a list of strings (token ids: 422).")
    normalize: bool = Field(True, description=NORMALIZE)
    dimensions: StrictInt | None = Field(None, description="Must equal the model's dimension if given.")

    def item_count(self) -> int:
        return items_in(self.inputs)


SIMILARITY_EXAMPLE: dict[str, JsonValue] = {
    "source_sentence": "a red circle",
    "sentences": ["a red circle on the left", "a blue square"],
}


class SimilarityInput(BaseModel):
    source_sentence: str
    sentences: list[str] = Field(min_length=1)


class TEISimilarityRequest(Counted, _TEIRequest):
    model_config = ConfigDict(json_schema_extra={"examples": [{"inputs": SIMILARITY_EXAMPLE}]})

    inputs: SimilarityInput
    parameters: dict[str, object] | None = Field(None, description="Accepted and ignored.")

    def item_count(self) -> int:
        return 1 + len(self.inputs.sentences)


class TEIRootRequest(Counted, _TEIRequest):
    """``POST /``: a feature-extraction body, or a sentence-similarity one (``inputs`` an object)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"inputs": "a red circle"}, {"inputs": SIMILARITY_EXAMPLE}]}
    )

    inputs: SimilarityInput | Inputs
    normalize: bool = Field(True, description=NORMALIZE)
    dimensions: StrictInt | None = None
    parameters: dict[str, object] | None = None

    def item_count(self) -> int:
        if isinstance(self.inputs, SimilarityInput):
            return 1 + len(self.inputs.sentences)
        return items_in(self.inputs)


class TEIEmbedAllRequest(Counted, _TEIRequest):
    """``/embed_all``: the encoder's state after each token of each input."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{"inputs": "a red circle"}]})

    inputs: Inputs = Field(description="A string or a list of strings (token ids: 422).")

    def item_count(self) -> int:
        return items_in(self.inputs)


class TEIDecodeRequest(Counted, BaseModel):
    """``/decode``: token ids (as ``/tokenize`` gives them) back to text."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{"ids": [2, 14, 9, 0]}]})

    ids: list[StrictInt] | list[list[StrictInt]] = Field(
        description="One list of token ids, or a list of them (each at most max_tokens ids)."
    )
    skip_special_tokens: bool = Field(True, description="Leave out <eos>.")

    def item_count(self) -> int:
        return 1 if not self.ids or isinstance(self.ids[0], int) else len(self.ids)


class TEITokenizeRequest(Counted, BaseModel):
    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{"inputs": "a red circle"}]})

    inputs: str | list[str]
    add_special_tokens: bool = Field(True, description="Append the model's eos token where it uses one.")
    prompt_name: str | None = None

    def item_count(self) -> int:
        return items_in(self.inputs)


class TEIToken(BaseModel):
    id: int
    text: str
    special: bool = Field(description="The appended <eos>.")
    start: int | None = Field(None, description="Character offsets are not tracked: null.")
    stop: int | None = None
