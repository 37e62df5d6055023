"""Model families: one object each, asked by every reader; a third family is one more object."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.evaluation.report import PUBLISHED
from lnserve.app.galleries.errors import GalleryMismatchError
from lnserve.app.galleries.layout import KINDS
from lnserve.app.galleries.store import GalleryStore
from lnserve.app.pull.catalog import CATALOG
from lnserve.app.pull.install import CONVERTERS
from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.errors import EncodeInputError
from lnserve.app.runtime.model_ref import ModelRef
from lnserve.app.runtime.retrieval import metric_for
from lnserve.converters.artifact import read_artifact
from lnserve.converters.errors import ManifestMismatchError
from lnserve.converters.families import (
    FAMILIES,
    ORDER_EMBEDDING,
    RETRIEVAL_EVAL,
    SKIP_THOUGHTS,
    TRANSFER_EVAL,
    Family,
    family_of,
    has_image_encoder,
    lookup,
    may_hold,
)
from tests.conftest import LEGACY, inputs
from tests.support.architecture import family_comparisons


# -- each family's properties -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            ORDER_EMBEDDING,
            {
                "name": "order-embedding",
                "text_only": False,
                "stacked": False,
                "method": None,
                "metric": None,
                "tokenizer": "coco",
                "defaults": {"eos": True, "normalize": True},
                "converters": ("order-embedding",),
                "trainable": True,
                "evaluations": (RETRIEVAL_EVAL, TRANSFER_EVAL),
                "gallery_kinds": ("images", "captions"),
            },
        ),
        (
            SKIP_THOUGHTS,
            {
                "name": "skip-thoughts",
                "text_only": True,
                "stacked": True,
                "method": "cosine",
                "metric": "cosine",
                "tokenizer": "treebank",
                "defaults": {"eos": False, "normalize": True},
                "converters": ("skip-thoughts", "skip-thoughts-training"),
                "trainable": False,
                "evaluations": (TRANSFER_EVAL,),
                "gallery_kinds": ("captions",),
            },
        ),
    ],
    ids=lambda v: v.name if isinstance(v, Family) else "",
)
def test_each_family_says_what_it_is(family: Family, expected: dict[str, object]) -> None:
    assert {key: getattr(family, key) for key in expected} == expected
    assert FAMILIES[family.name] is family
    assert family_of(family.name) is family and family_of({"family": family.name}) is family
    assert has_image_encoder(family.name) is not family.text_only
    assert [may_hold(family.name, kind) for kind in ("images", "captions")] == [not family.text_only, True]
    assert set(family.gallery_kinds) <= set(KINDS)


def test_the_published_rows_are_the_skip_thoughts_family_s() -> None:
    assert PUBLISHED is SKIP_THOUGHTS.reference
    assert set(PUBLISHED) == {
        "combine-skip (skip-thoughts paper)",
        "LN skip-thoughts, 1 month (layer-norm paper)",
    }
    assert ORDER_EMBEDDING.reference == {}


def test_the_method_and_cells_come_from_the_manifest_unless_the_family_fixes_them() -> None:
    oe = {"family": "order-embedding", "cell": "lngru", "options": {"method": "cosine"}}
    st = {"family": "skip-thoughts", "parts": {"uni": {"cell": "gru"}, "bi": {"cell": "lngru"}}}
    assert family_of(oe).method_of(oe) == "cosine" and family_of(oe).cells(oe) == ["lngru"]
    assert family_of(st).method_of(st) == "cosine" and family_of(st).cells(st) == ["gru", "lngru"]
    assert metric_for("cosine", "order-embedding") == "negative_cosine"
    assert metric_for("order", "order-embedding") == "order_violation"
    assert metric_for("cosine", "skip-thoughts") == "cosine"


@pytest.mark.parametrize("name", ["bert", "", "Skip-Thoughts", None, 3, ["skip-thoughts"], {"a": 1}])
def test_an_unknown_family_is_refused(name: object) -> None:
    assert lookup(name) is None and lookup({"family": name}) is None
    assert not has_image_encoder(name) and not may_hold(name, "captions")
    with pytest.raises(ManifestMismatchError, match="unknown family"):
        family_of(name)  # type: ignore[arg-type]
    with pytest.raises(ManifestMismatchError, match="unknown family"):
        family_of({"family": name})


def test_converted_artifacts_record_their_family_s_tokenizer_and_defaults(artifacts: dict[str, Path]) -> None:
    for path in artifacts.values():
        m = read_artifact(path).manifest
        family = family_of(m)
        assert m["tokenizer"] == family.tokenizer and m["defaults"] == family.defaults


def test_every_published_set_is_converted_by_a_converter_its_family_names() -> None:
    assert set(CONVERTERS) == {c for f in FAMILIES.values() for c in f.converters}
    for entry in CATALOG.values():
        assert entry.converter in family_of(entry.family).converters, entry.name


def test_only_the_family_module_compares_family_names() -> None:
    assert all(where.startswith("converters/families.py:") for where in family_comparisons())
    assert len(family_comparisons()) <= 4


# -- a third family is one new object ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def st_artifact(artifacts: dict[str, Path]) -> Path:
    return artifacts["skipthoughts_lngru"]


def _renamed(src: Path, family: str, out: Path) -> Path:
    """``src`` as an artifact of ``family`` (the manifest's family is outside the files it hashes)."""
    shutil.copytree(src, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["family"] = family
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("base", [ORDER_EMBEDDING, SKIP_THOUGHTS], ids=lambda f: f.name)
def test_a_third_family_needs_only_one_new_object(
    base: Family, artifacts: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family shaped like ``base`` under a new name: registered, the artifact reader, the engine (text and
    images), model identity, the score's metric and the gallery store (creation, the stored description read
    back, queries) treat it as ``base``; nothing else is told about it."""
    src = artifacts["oe_order_lngru" if base is ORDER_EMBEDDING else "skipthoughts_lngru"]
    path = _renamed(src, "third-family", tmp_path / "third")
    with pytest.raises(ManifestMismatchError, match="unknown family 'third-family'"):
        read_artifact(path)  # unregistered: refused as any unknown family

    third = dataclasses.replace(base, name="third-family")
    monkeypatch.setitem(FAMILIES, third.name, third)
    engine, reference = Engine.open(path, backend="torch"), Engine.open(src, backend="torch")
    assert engine.family is third and engine.method == reference.method
    sentences = inputs()["order_embedding"]["captions"][:5]
    vectors = engine.encode_sentences(sentences, pretokenized=True)
    np.testing.assert_array_equal(vectors, reference.encode_sentences(sentences, pretokenized=True))

    ref = ModelRef.from_artifact(engine.artifact)
    assert (ref.family, ref.method) == ("third-family", reference.method)
    assert metric_for(ref.method, ref.family) == metric_for(reference.method, base.name)
    store = GalleryStore(tmp_path / "galleries", scorer="numpy")
    store.create("caps", kind="captions", model=ref)
    store.add("caps", vectors, ids=[f"c{i}" for i in range(len(vectors))])
    if third.text_only:
        with pytest.raises(EncodeInputError, match=r"no image encoder \(third-family encodes text only\)"):
            engine.encode_images(np.ones((1, 4), dtype=np.float32))
        with pytest.raises(GalleryMismatchError, match="third-family models embed text only"):
            store.create("ims", kind="images", model=ref)
        with pytest.raises(GalleryMismatchError, match="third-family models have no image encoder"):
            store.search("caps", vectors[:1], 2, query_kind="images", model=ref)
    else:
        images = engine.encode_images(np.load(LEGACY / "order_embedding" / "images.npy"))
        store.create("ims", kind="images", model=ref)
        store.add("ims", images, ids=[f"i{i}" for i in range(len(images))])
        assert store.search("ims", vectors, 3, query_kind="captions", model=ref)["results"]

    reopened = GalleryStore(tmp_path / "galleries", scorer="numpy")  # the description read back from disk
    info = reopened.get("caps")
    assert (info.family, info.metric) == ("third-family", metric_for(ref.method, ref.family))
    assert reopened.search("caps", vectors[:1], 2, query_kind="captions", model=ref)["results"]
