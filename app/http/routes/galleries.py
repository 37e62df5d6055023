"""``/galleries``: create galleries, add items (captions as text, images as CNN features, encoded here
with the gallery's model), delete items or whole galleries, list and describe galleries.

An add is acknowledged (200 with the ids) only after the store has committed it durably; a crash before
that leaves no trace of the batch (``lnserve.app.galleries.store``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.openapi.models import Example
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from ...galleries.rules import ITEM_ID_RULE, new_item_id
from ...serving.galleries import add_items as add_gallery_items
from ...serving.galleries import warm_scorer
from ..body_parsing import OffloadedBodyRoute
from ..deps import GalleriesDep, RegistryDep, SettingsDep
from ..schemas import ErrorBody
from ..schemas.retrieval import (
    GalleryCreate,
    GalleryList,
    GalleryOut,
    ItemOut,
    ItemsAdd,
    ItemsAdded,
)
from .gallery_helpers import new_item, served_model


def _ex(value: str) -> dict[str, Example]:
    """A path or query example that runs on the demo server, in the order Swagger lists the routes: the demo
    gallery to read, ``my-captions`` (made by ``POST /galleries``' example) to add to and delete from."""
    return {"demo": Example(value=value)}


# the examples of the path parameters (see _ex)
DemoGallery = Annotated[str, Path(openapi_examples=_ex("demo-images"))]
NewGallery = Annotated[str, Path(openapi_examples=_ex("my-captions"))]
DemoItem = Annotated[str, Path(openapi_examples=_ex("test-0"))]
NewItem = Annotated[str, Path(openapi_examples=_ex("c1"))]

router = APIRouter(prefix="/galleries", tags=["galleries"], route_class=OffloadedBodyRoute)
_CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": ErrorBody, "description": "Name or id taken."}}


@router.post("", response_model=GalleryOut, status_code=201, responses=_CONFLICT)
async def create_gallery(body: GalleryCreate, registry: RegistryDep, store: GalleriesDep) -> JSONResponse:
    """Create an empty gallery of images or captions embedded by one model (default: the default model)."""
    ref = registry.get(body.model).model_ref()
    info = await run_in_threadpool(lambda: store.create(body.name, kind=body.kind, model=ref))
    if info.metric == "order_violation":
        warm_scorer(store)
    return JSONResponse(info.as_dict(), status_code=201)


@router.get("", response_model=GalleryList)
async def list_galleries(store: GalleriesDep) -> GalleryList:
    """Every gallery: kind, model, item count and what its scores mean."""
    infos = await run_in_threadpool(store.list)
    return GalleryList.model_validate({"galleries": [i.as_dict() for i in infos]})


@router.get("/{name}", response_model=GalleryOut)
async def get_gallery(name: DemoGallery, store: GalleriesDep) -> GalleryOut:
    """One gallery: kind, model, item count and what its scores mean."""
    info = await run_in_threadpool(store.get, name)
    return GalleryOut.model_validate(info.as_dict())


@router.delete("/{name}", status_code=204, responses={404: {"model": ErrorBody}})
async def delete_gallery(name: NewGallery, store: GalleriesDep) -> Response:
    """Delete a whole gallery (a quarantined one too): the same crash-safe path as ``lnserve gallery rm``."""
    await run_in_threadpool(store.remove, name)
    return Response(status_code=204)


@router.post("/{name}/items", response_model=ItemsAdded, responses=_CONFLICT)
async def add_items(
    name: NewGallery,
    body: ItemsAdd,
    request: Request,
    registry: RegistryDep,
    store: GalleriesDep,
    settings: SettingsDep,
) -> ItemsAdded:
    """Encode items with the gallery's model and add them atomically (all or none); returns their ids."""
    items = [new_item(it, it.id if it.id is not None else new_item_id()) for it in body.items]
    model = served_model(request, registry, body)
    added = await add_gallery_items(store, name, items, model, max_items=settings.max_sentences)
    return ItemsAdded(gallery=name, ids=added.ids, count=added.count)


_ITEM_ID_DOC = (
    "The item's id, percent-encoded. Any id: this form also reaches ids stored before new "
    f"ids had to be {ITEM_ID_RULE}, which no path segment can address."
)
ItemIdQuery = Annotated[
    str,
    Query(alias="id", min_length=1, max_length=256, description=_ITEM_ID_DOC, openapi_examples=_ex("test-0")),
]
ItemIdToDelete = Annotated[
    str, Query(alias="id", min_length=1, max_length=256, description=_ITEM_ID_DOC, openapi_examples=_ex("c2"))
]


@router.get("/{name}/items", response_model=ItemOut, responses={404: {"model": ErrorBody}})
async def get_item_by_query(name: DemoGallery, item_id: ItemIdQuery, store: GalleriesDep) -> JSONResponse:
    """One live item's id and payload, the id given as ``?id=``."""
    return await run_in_threadpool(lambda: JSONResponse(store.get_item(name, item_id)))  # payload: any size


@router.delete("/{name}/items", status_code=204, responses={404: {"model": ErrorBody}})
async def delete_item_by_query(name: NewGallery, item_id: ItemIdToDelete, store: GalleriesDep) -> Response:
    """Delete one item, the id given as ``?id=``."""
    await run_in_threadpool(store.delete_item, name, item_id)
    return Response(status_code=204)


@router.get("/{name}/items/{item_id}", response_model=ItemOut)
async def get_item(name: DemoGallery, item_id: DemoItem, store: GalleriesDep) -> JSONResponse:
    """One live item's id and payload."""
    return await run_in_threadpool(lambda: JSONResponse(store.get_item(name, item_id)))  # payload: any size


@router.delete("/{name}/items/{item_id}", status_code=204, responses={404: {"model": ErrorBody}})
async def delete_item(name: NewGallery, item_id: NewItem, store: GalleriesDep) -> Response:
    """Delete one item; it stops appearing in results at once."""
    await run_in_threadpool(store.delete_item, name, item_id)
    return Response(status_code=204)
