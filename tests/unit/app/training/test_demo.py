"""The shipped demo: the artifact loads, its gallery installs, and "a red circle" finds red circles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.demo_model.data import DEMO_DIR, DEMO_NAME, EVAL_JSON, ensure_demo_artifact
from lnserve.app.galleries.demo import DEMO_GALLERY, install_demo_gallery
from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.engine import Engine
from lnserve.app.training.world import World, write_world


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.open(ensure_demo_artifact(), backend="torch")


def _has(payload: dict, shape: str, colour: str) -> bool:
    return any(o["shape"] == shape and o["colour"] == colour for o in payload["objects"])


def test_shipped_artifact_is_the_trained_demo(engine: Engine) -> None:
    m = engine.artifact.manifest
    assert (engine.artifact.name, m["cell"], m["demo"]) == (DEMO_NAME, "lngru", True)
    assert "synthetic world" in m["description"] and "random" not in m["description"]
    assert m["training"]["data"].startswith("world:")
    size = sum(p.stat().st_size for p in DEMO_DIR.iterdir())
    assert size < 1 << 20
    evaluation = json.loads((DEMO_DIR / EVAL_JSON).read_text())
    assert evaluation["t2i"]["r10"] > 50.0  # held-out caption->image recall, from `lnserve eval`


@pytest.mark.parametrize(
    ("query", "shape", "colour"), [("a red circle", "circle", "red"), ("a blue square", "square", "blue")]
)
def test_query_ranks_matching_images_first(
    engine: Engine, tmp_path: Path, query: str, shape: str, colour: str
) -> None:
    store = GalleryStore(tmp_path)
    info = install_demo_gallery(store, engine=engine)
    assert info.count == 500 and info.kind == "images"
    q = engine.encode_sentences([query])
    hits = store.search(
        DEMO_GALLERY, q, k=5, query_kind="captions", model=ModelRef.from_artifact(engine.artifact)
    )
    payloads = [h["payload"] for h in hits["results"][0]]
    assert all(_has(p, shape, colour) for p in payloads), payloads
    assert install_demo_gallery(store, engine=engine) == info  # idempotent


def test_world_is_deterministic(tmp_path: Path) -> None:
    sizes = {"train": 3, "dev": 2}
    write_world(tmp_path / "a", sizes=sizes)
    write_world(tmp_path / "b", sizes=sizes)
    for name in ("train_caps.txt", "train_ims.npy", "dev_scenes.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    split = World().split("dev", 4)
    assert split.images.shape == (4, 120) and len(split.captions) == 20
    np.testing.assert_allclose(np.linalg.norm(split.images, axis=1), 1.0, rtol=1e-6)


def test_shipping_replaces_the_data_and_keeps_the_package(tmp_path: Path) -> None:
    """``make demo-model`` ships into app/demo_model/, which is also a package (its accessors): shipping must
    replace the data files and leave the modules."""
    from lnserve.app.training.demo import ship

    out = tmp_path / "demo_model"
    out.mkdir()
    (out / "__init__.py").write_text('"""package"""\n', encoding="utf-8")
    (out / "data.py").write_text("X = 1\n", encoding="utf-8")
    (out / "stale.json").write_text("{}", encoding="utf-8")
    world = tmp_path / "world"
    world.mkdir()
    np.save(world / "test_ims.npy", np.load(DEMO_DIR / "gallery_images.npy")[:3])
    scenes = (DEMO_DIR / "gallery_payloads.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (world / "test_scenes.jsonl").write_text("\n".join(scenes) + "\n", encoding="utf-8")
    ship(DEMO_DIR, world, DEMO_DIR / EVAL_JSON, out=out, size=3)
    assert (out / "__init__.py").read_text(encoding="utf-8") == '"""package"""\n'
    assert (out / "data.py").is_file() and not (out / "stale.json").exists()
    assert np.load(out / "gallery_images.npy").shape[0] == 3
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["name"] == DEMO_NAME
