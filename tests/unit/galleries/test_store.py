"""GalleryStore: golden parity through real encoders, persistence, crash safety, concurrency, bad inputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.galleries.errors import (
    DuplicateItemError,
    GalleryExistsError,
    GalleryInputError,
    GalleryMismatchError,
    GalleryNotFoundError,
    ItemNotFoundError,
)
from lnserve.app.galleries.store import MAX_K, GalleryStore, ModelRef
from lnserve.app.runtime.engine import Engine
from tests.conftest import LEGACY, OE_MODELS, golden, inputs

REPO = Path(__file__).resolve().parents[3]


def _store(tmp_path: Path) -> GalleryStore:
    return GalleryStore(tmp_path / "galleries", scorer="numpy")


def _toy_model(dim: int = 8, sha: str = "a" * 64) -> ModelRef:
    return ModelRef(name="toy", sha256=sha, family="order-embedding", method="order", dim=dim)


@pytest.mark.parametrize("name", OE_MODELS)
def test_search_through_the_store_matches_golden_errors(
    name: str, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    g, store = golden(name), _store(tmp_path)
    engine = Engine.open(artifacts[name], backend="torch")
    ref = ModelRef.from_artifact(engine.artifact)
    sent = engine.encode_sentences(inputs()["order_embedding"]["captions"], pretokenized=True)
    imgs = engine.encode_images(np.load(LEGACY / "order_embedding" / "images.npy"))
    store.create("ims", kind="images", model=ref)
    store.add_items("ims", imgs, ids=[f"i{j}" for j in range(len(imgs))])
    store.create("caps", kind="captions", model=ref)
    store.add_items(
        "caps", sent, ids=[f"c{j}" for j in range(len(sent))], payloads=[{"n": j} for j in range(40)]
    )

    t2i = store.search("ims", sent, 12, query_kind="captions", model=ref)
    assert t2i["score"]["direction"] == "lower_is_better"
    for row, hits in zip(g["errs"], t2i["results"], strict=True):
        want = np.argsort(row, kind="stable")
        assert [h["id"] for h in hits] == [f"i{j}" for j in want]
        np.testing.assert_allclose([h["score"] for h in hits], row[want], atol=1e-5, rtol=0)
    i2t = store.search("caps", imgs, 5, query_kind="images")
    for col, hits in zip(g["errs"].T, i2t["results"], strict=True):
        want = np.argsort(col, kind="stable")[:5]
        assert [h["payload"]["n"] for h in hits] == want.tolist()
        np.testing.assert_allclose([h["score"] for h in hits], col[want], atol=1e-5, rtol=0)


def test_skip_thoughts_caption_gallery_uses_cosine(artifacts: dict[str, Path], tmp_path: Path) -> None:
    engine = Engine.open(artifacts["skipthoughts_gru"], backend="torch")
    ref, store = ModelRef.from_artifact(engine.artifact), _store(tmp_path)
    sents = inputs()["skipthoughts"]["sentences"]
    vecs = engine.encode_sentences(sents, pretokenized=True)
    with pytest.raises(GalleryMismatchError):
        store.create("st-images", kind="images", model=ref)
    store.create("st", kind="captions", model=ref)
    store.add_items("st", vecs, payloads=[{"text": s} for s in sents])
    out = store.search("st", vecs[4], 3, query_kind="captions")
    assert out["score"] == {
        "metric": "cosine",
        "direction": "higher_is_better",
        "meaning": out["score"]["meaning"],
    }
    top = out["results"][0]
    assert top[0]["payload"]["text"] == sents[4] and top[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert top[0]["score"] >= top[1]["score"] >= top[2]["score"]


def test_persistence_across_reopen_and_deletes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vecs = np.abs(rng.standard_normal((30, 8))).astype(np.float32)
    store = _store(tmp_path)
    store.create("g", kind="images", model=_toy_model())
    store.add_items(
        "g", vecs, ids=[str(i) for i in range(30)], payloads=[{"url": f"u{i}"} for i in range(30)]
    )
    before = store.search("g", vecs[:2], 5, query_kind="captions")
    store.delete_item("g", "7")

    reopened = _store(tmp_path)
    info = reopened.get("g")
    assert (info.count, info.kind, info.dim, info.metric) == (29, "images", 8, "order_violation")
    assert [i.name for i in reopened.list()] == ["g"]
    item = reopened.get_item("g", "3", with_vector=True)
    assert item["payload"] == {"url": "u3"} and np.array_equal(item["vector"], vecs[3])
    with pytest.raises(ItemNotFoundError):
        reopened.get_item("g", "7")
    after = reopened.search("g", vecs[:2], 5, query_kind="captions")
    want = [[h for h in row if h["id"] != "7"] for row in before["results"]]
    assert [[h["id"] for h in row][: len(w)] for row, w in zip(after["results"], want, strict=True)] == [
        [h["id"] for h in w] for w in want
    ]
    assert all(
        h["id"] != "7"
        for row in reopened.search("g", vecs, 29, query_kind="captions")["results"]
        for h in row
    )
    reopened.remove("g")
    assert reopened.list() == []
    with pytest.raises(GalleryNotFoundError):
        store.get("g")


_WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from lnserve.app.galleries.store import GalleryStore
    store = GalleryStore(sys.argv[1], scorer="numpy")
    for b in range(10**6):
        vecs = np.random.default_rng(b).random((50, 8), dtype=np.float32)
        store.add_items("g", vecs, ids=[f"{b}-{i}" for i in range(50)], payloads=[{"b": b}] * 50)
        print(f"ACK {b}", flush=True)
    """
)


def test_kill_9_during_bulk_insert_loses_no_acknowledged_item(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create("g", kind="images", model=_toy_model())
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(store.root)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    acked = []
    assert child.stdout is not None
    for line in child.stdout:
        acked.append(int(line.split()[1]))
        if len(acked) >= 15:
            break
    os.kill(child.pid, signal.SIGKILL)  # mid-write: the child never stops between batches
    child.wait()
    acked += [int(line.split()[1]) for line in child.stdout.read().splitlines() if line.startswith("ACK")]
    child.stdout.close()

    reopened = _store(tmp_path)
    count = reopened.get("g").count
    assert count % 50 == 0 and count // 50 >= len(
        acked
    )  # whole batches only; a committed one may be unprinted
    for b in range(count // 50):
        want = np.random.default_rng(b).random((50, 8), dtype=np.float32)
        for i in (0, 49):
            item = reopened.get_item("g", f"{b}-{i}", with_vector=True)
            assert item["payload"] == {"b": b} and np.array_equal(item["vector"], want[i])
    # a write after the crash truncates any unacknowledged tail and lands right after the last batch
    extra = np.full((1, 8), 0.5, np.float32)
    reopened.add_items("g", extra, ids=["after"])
    assert reopened.get_item("g", "after", with_vector=True)["vector"].tolist() == extra[0].tolist()
    hits = reopened.search("g", np.zeros(8, np.float32), MAX_K, query_kind="captions")["results"][0]
    assert len(hits) == min(MAX_K, count + 1)


def test_concurrent_inserts_and_queries(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create("g", kind="images", model=_toy_model())
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(w: int) -> None:
        try:
            for b in range(15):
                vecs = np.random.default_rng(w * 100 + b).random((20, 8), dtype=np.float32)
                store.add_items("g", vecs, ids=[f"{w}-{b}-{i}" for i in range(20)])
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            while not done.is_set():
                for row in store.search("g", np.ones((3, 8), np.float32), 10, query_kind="captions")[
                    "results"
                ]:
                    scores = [h["score"] for h in row]
                    assert scores == sorted(scores) and len({h["id"] for h in row}) == len(row)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors
    assert store.get("g").count == 4 * 15 * 20
    assert len(store.search("g", np.ones(8, np.float32), MAX_K, query_kind="captions")["results"][0]) == MAX_K


def test_bad_inputs_raise_coded_errors(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create("g", kind="images", model=_toy_model())
    store.add_items("g", np.ones((2, 8), np.float32), ids=["a", "b"])
    cases = [
        (lambda: store.search("nope", np.ones(8), 1, query_kind="captions"), GalleryNotFoundError, 404),
        (lambda: store.search("g", np.ones(7), 1, query_kind="captions"), GalleryInputError, 422),
        (lambda: store.search("g", np.ones(8), 0, query_kind="captions"), GalleryInputError, 422),
        (lambda: store.search("g", np.ones(8), MAX_K + 1, query_kind="captions"), GalleryInputError, 422),
        (lambda: store.search("g", np.ones(8), True, query_kind="captions"), GalleryInputError, 422),
        (lambda: store.search("g", np.ones(8), 1, query_kind="images"), GalleryMismatchError, 422),
        (lambda: store.search("g", np.ones(8), 1, query_kind="audio"), GalleryInputError, 422),
        (
            lambda: store.search("g", np.ones(8), 1, query_kind="captions", model=_toy_model(sha="b" * 64)),
            GalleryMismatchError,
            422,
        ),
        (lambda: store.add_items("g", np.full((1, 8), np.nan)), GalleryInputError, 422),
        (lambda: store.add_items("g", np.ones((1, 8)), kind="captions"), GalleryMismatchError, 422),
        (lambda: store.add_items("g", np.ones((1, 8)), ids=["a"]), DuplicateItemError, 409),
        (lambda: store.add_items("g", np.ones((2, 8)), ids=["x", "x"]), DuplicateItemError, 409),
        (lambda: store.add_items("g", np.ones((1, 8)), payloads=[{1j}]), GalleryInputError, 422),
        (lambda: store.delete_item("g", "zz"), ItemNotFoundError, 404),
        (lambda: store.create("g", kind="images", model=_toy_model()), GalleryExistsError, 409),
        (lambda: store.create("../evil", kind="images", model=_toy_model()), GalleryInputError, 422),
        (lambda: store.create("h", kind="videos", model=_toy_model()), GalleryInputError, 422),
        (lambda: store.remove("nope"), GalleryNotFoundError, 404),
    ]
    for call, error, status in cases:
        with pytest.raises(error) as info:
            call()
        assert info.value.http_status == status and info.value.exit_code == 2 and info.value.code
    assert store.get("g").count == 2  # nothing above changed the gallery
