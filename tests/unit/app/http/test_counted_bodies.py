"""Count limits derive from the request models: every route body that carries a list declares how many items
it holds (``schemas.counted.Counted``), and body parsing limits every such body, a model declared anywhere
included, with nothing registered elsewhere."""

from __future__ import annotations

import asyncio
import importlib
import typing
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from lnserve.app.http.body_parsing import BodyParser
from lnserve.app.http.routes import ROUTER_MODULES
from lnserve.app.http.schemas.counted import Counted
from lnserve.app.serving.errors import TooManySentencesError

LIMIT = 3


class FreshRequest(Counted, BaseModel):
    """A body model for a route that does not exist yet: declared here, registered nowhere."""

    texts: list[str]

    def item_count(self) -> int:
        return len(self.texts)


def _route_bodies() -> dict[str, type[BaseModel]]:
    """Every body model a route of the app accepts, by name."""
    found: dict[str, type[BaseModel]] = {}
    for name in ROUTER_MODULES:
        router = importlib.import_module(f"lnserve.app.http.routes.{name}").router
        for route in router.routes:
            field = route.body_field if isinstance(route, APIRoute) else None
            model = field.field_info.annotation if field is not None else None
            if isinstance(model, type) and issubclass(model, BaseModel):
                found[model.__name__] = model
    return found


def _has_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_has_list(arg) for arg in typing.get_args(annotation))


def _listy(model: type[BaseModel]) -> bool:
    """A field of the body is (or may be) a list, or a model with one (TEI's similarity ``inputs``)."""
    for field in model.model_fields.values():
        annotation = field.annotation
        if _has_list(annotation):
            return True
        nested = [a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type)]
        if any(issubclass(a, BaseModel) and _listy(a) for a in nested):
            return True
    return False


ROUTE_BODIES = _route_bodies()

# per counted body: a valid body carrying n items (n >= 2)
BODIES: dict[str, Callable[[int], dict[str, Any]]] = {
    "EncodeRequest": lambda n: {"sentences": ["a"] * n},
    "EncodeImagesRequest": lambda n: {"features": [[0.5]] * n},
    "EmbeddingsRequest": lambda n: {"input": ["a"] * n},
    "ItemsAdd": lambda n: {"items": [{"text": "a"}] * n},
    "RetrieveRequest": lambda n: {"gallery": "g", "queries": [{"text": "a"}] * n},
    "TEIEmbedRequest": lambda n: {"inputs": ["a"] * n},
    "TEISimilarityRequest": lambda n: {"inputs": {"source_sentence": "a", "sentences": ["b"] * (n - 1)}},
    "TEIRootRequest": lambda n: {"inputs": {"source_sentence": "a", "sentences": ["b"] * (n - 1)}},
    "TEIEmbedAllRequest": lambda n: {"inputs": ["a"] * n},
    "TEIDecodeRequest": lambda n: {"ids": [[1]] * n},
    "TEITokenizeRequest": lambda n: {"inputs": ["a"] * n},
    "TokenizeRequest": lambda n: {"sentences": ["a"] * n},
    "ScoreRequest": lambda n: {"captions": ["a"] * n, "images": [[0.5]]},
    "FreshRequest": lambda n: {"texts": ["a"] * n},
}
MODELS = {**ROUTE_BODIES, "FreshRequest": FreshRequest}


@pytest.mark.parametrize("name", sorted(n for n, m in ROUTE_BODIES.items() if _listy(m)))
def test_every_route_body_with_a_list_declares_its_count(name: str) -> None:
    """A route whose body carries a list of texts, features, items, queries or ids is count-limited by
    its model: a new one that forgets is caught here, not by a client's million-row body."""
    assert issubclass(ROUTE_BODIES[name], Counted), f"{name} carries a list: derive it from Counted"
    assert name in BODIES, f"{name}: add a body of n items to BODIES"


def test_the_scan_sees_the_encoding_routes() -> None:
    """The check above runs over the app's routes (not a list that could miss a new one)."""
    assert {"EncodeRequest", "TEIEmbedRequest", "ScoreRequest", "ItemsAdd"} <= set(ROUTE_BODIES)


@pytest.fixture(scope="module")
def parser() -> Iterator[BodyParser]:
    body_parser = BodyParser()
    yield body_parser
    body_parser.close()


@pytest.mark.parametrize("name", sorted(BODIES))
def test_body_parsing_limits_every_counted_body(name: str, parser: BodyParser) -> None:
    """In the parsing worker (large bodies): at the limit the body comes back, one over it is refused
    with its model's own count and label, a model declared only in this test included."""
    model = MODELS[name]
    assert issubclass(model, Counted)

    async def parse(n: int) -> BaseModel:
        return await parser.parse(model, orjson.dumps(BODIES[name](n)), max_items=LIMIT)

    body = asyncio.run(parse(LIMIT))
    assert isinstance(body, Counted) and body.item_count() == LIMIT
    with pytest.raises(TooManySentencesError) as refused:
        asyncio.run(parse(LIMIT + 1))
    assert str(refused.value).startswith(f"{LIMIT + 1} {model.count_label} in one request")
