"""A shard's global positions: each placed batch maps its rows to the positions one store would have given
them, including after a batch that never committed (a crash, or a refused duplicate) at the same rows."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.galleries.errors import DuplicateItemError, GalleryMismatchError
from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.scale import shard_store
from lnserve.app.scale.shard_store import ShardStore, shard_root
from tests.support.gallery_opens import count_gallery_opens

MODEL = ModelRef(name="m", identity="0" * 64, family="order-embedding", method="order", dim=3)


def _vecs(n: int, seed: int) -> np.ndarray:
    return np.abs(np.random.default_rng(seed).normal(size=(n, 3))).astype(np.float32)


def test_placed_batches_report_global_positions(tmp_path: Path) -> None:
    store = ShardStore(shard_root(tmp_path, 1, 2))
    assert store.root == tmp_path / "shard-1-of-2"
    store.create("g", kind="images", model=MODEL)
    store.add_placed("g", _vecs(2, 0), ids=["a", "b"], payloads=None, model=MODEL, global_start=0)
    store.add_placed("g", _vecs(3, 1), ids=["c", "d", "e"], payloads=None, model=MODEL, global_start=5)
    assert store.global_positions("g", ["a", "b", "c", "e", "zz"]) == {"a": 0, "b": 1, "c": 5, "e": 7}
    assert store.rows("g") == 5 and store.prepare("g", ["b", "x"]) == (5, ["b"])

    # a batch refused after its placement row was written leaves that row behind; the next batch at the
    # same local rows replaces it (a crash between the two steps leaves the same state)
    with pytest.raises(DuplicateItemError):
        store.add_placed("g", _vecs(1, 2), ids=["a"], payloads=None, model=MODEL, global_start=99)
    store.add_placed("g", _vecs(2, 3), ids=["f", "g"], payloads=None, model=MODEL, global_start=11)
    assert store.global_positions("g", ["f", "g"]) == {"f": 11, "g": 12}

    store.delete_item("g", "d")
    found = store.search_placed("g", _vecs(1, 4), 10, query_kind="captions", model=MODEL)
    hits = found["results"][0]
    assert {h["id"]: h["pos"] for h in hits} == {"a": 0, "b": 1, "c": 5, "e": 7, "f": 11, "g": 12}
    plain = store.search("g", _vecs(1, 4), 10, query_kind="captions", model=MODEL)["results"][0]
    assert [{k: v for k, v in h.items() if k != "pos"} for h in hits] == plain  # the store's own answer


def test_a_shard_search_opens_the_gallery_once_and_maps_rows_without_id_lookups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard used to re-open and re-check the gallery to find the placement file, then look every hit's
    id up again to learn the row the scan had already found."""
    store = ShardStore(shard_root(tmp_path, 0, 2))
    store.create("g", kind="images", model=MODEL)
    store.add_placed("g", _vecs(4, 0), ids=list("abcd"), payloads=None, model=MODEL, global_start=3)
    opens = count_gallery_opens(monkeypatch)
    monkeypatch.setattr(ShardStore, "global_positions", None)  # the id -> position lookup is not needed
    found = store.search_placed("g", _vecs(2, 1), 3, query_kind="captions", model=MODEL)
    assert opens == ["g"]
    assert all(h["pos"] == 3 + "abcd".index(h["id"]) and "row" not in h for r in found["results"] for h in r)


def test_a_shard_holds_a_gallery_store_and_uses_only_its_public_methods(tmp_path: Path) -> None:
    """Composition, not inheritance: the shard answers as the store it holds, through public methods only
    (a restructured store keeps the shard working as long as it keeps those)."""
    assert not issubclass(ShardStore, GalleryStore)
    tree = ast.parse(inspect.getsource(shard_store))
    reached = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "galleries"
    }
    store = GalleryStore(tmp_path)
    assert reached and all(hasattr(store, name) and not name.startswith("_") for name in reached), reached


def test_the_store_answers_a_shards_questions(tmp_path: Path) -> None:
    """The public seams a shard places batches with: committed rows (deleted ones included), the checks
    before a write, live items' rows, and hits that carry their rows."""
    store = GalleryStore(tmp_path)
    store.create("g", kind="images", model=MODEL)
    store.add("g", _vecs(3, 0), ids=["a", "b", "c"], model=MODEL)
    store.delete_item("g", "b")
    assert store.committed_rows("g") == 3
    assert store.check_write("g", ["c", "x", "a"], kind="images", model=MODEL) == (3, ["a", "c"])
    with pytest.raises(GalleryMismatchError):
        store.check_write("g", ["x"], kind="captions", model=MODEL)
    assert store.item_rows("g", ["c", "b", "a", "c"]) == {"a": 0, "c": 2}
    hits = store.search_rows("g", _vecs(1, 1), 5, query_kind="captions", model=MODEL)["results"][0]
    plain = store.search("g", _vecs(1, 1), 5, query_kind="captions", model=MODEL)["results"][0]
    assert [h.pop("row") for h in hits] == [{"a": 0, "c": 2}[h["id"]] for h in plain] and hits == plain
