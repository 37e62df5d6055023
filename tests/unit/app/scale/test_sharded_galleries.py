"""The Ray facade behaves as one store per shard: leftovers cleaned and galleries verified on every shard, a
gallery damaged on any shard quarantined as a whole (listed with that shard's reason, every read and write
refused), and the model's identity checked and adopted on every shard.

Real shards (``GalleryShard`` over real folders) through Ray Serve's in-process local testing mode (no Ray
instance: quick); ``tests/e2e/test_ray.py`` runs the same through a real ``serve --ray``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.galleries.errors import GalleryCorruptError, GalleryMismatchError, ItemNotFoundError
from lnserve.app.galleries.layout import CorruptGallery, GalleryInfo
from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.scale.errors import ShardUnavailableError
from lnserve.app.scale.galleries import ShardedGalleries
from lnserve.app.scale.shard_store import shard_root
from lnserve.app.scale.shards import GalleryShard, shard_name

serve = pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'lnserve[ray]'")

MODEL = ModelRef(name="m", identity="0" * 64, family="order-embedding", method="order", dim=3)
SHARDS = 2


def _start(root: Path) -> ShardedGalleries:
    """The shards as ``serve --ray`` lays them out, in this process: shard 0 coordinates the writes through
    handles of its own to the others, and the facade reads every shard through its own handle (another
    instance of the shard over the same folder, as another process would be). Calling it again over the
    same root is a restart: nothing verified is remembered."""
    deployment = serve.deployment(GalleryShard)

    def bound(i: int, *peers: object) -> object:
        return deployment.options(name=shard_name(i)).bind(i, SHARDS, str(root), "numpy", *peers)

    def run(app: object) -> object:
        return serve.run(app, name=f"galleries-{uuid.uuid4().hex}", _local_testing_mode=True)

    coordinator = run(bound(0, *(bound(i) for i in range(1, SHARDS))))
    return ShardedGalleries([coordinator, *(run(bound(i)) for i in range(1, SHARDS))])


def _vecs(n: int, seed: int) -> np.ndarray:
    return np.abs(np.random.default_rng(seed).normal(size=(n, 3))).astype(np.float32)


def _part(root: Path, shard: int) -> GalleryStore:
    """One shard's folder read as a plain store (what ``lnserve gallery check --galleries-dir`` opens)."""
    return GalleryStore(shard_root(root, shard, SHARDS), scorer="numpy")


def _holds(part: GalleryStore, name: str, item_id: str) -> bool:
    try:
        part.get_item(name, item_id)
    except ItemNotFoundError:
        return False
    return True


def _fill(store: ShardedGalleries, name: str, batches: int) -> list[list[str]]:
    """Batches of 2 items; each goes to the shard holding fewest rows, so both shards hold some."""
    store.create(name, kind="images", model=MODEL)
    ids = [[f"{name}-{b}-{i}" for i in range(2)] for b in range(batches)]
    for b, batch in enumerate(ids):
        store.add(name, _vecs(2, b), ids=batch, model=MODEL)
    return ids


def _flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[5] ^= 0x10
    path.write_bytes(bytes(data))


# how shard 1's part of a gallery is damaged -> (words of the reason, restart before use)
def _truncate(path: Path) -> None:
    os.truncate(path, 12)  # 1 of the part's 4 rows


DAMAGES = {
    "bit-rot": (_flip_bit, "do not match their checksum", True),  # found by the start-up verification
    "truncated": (_truncate, "fewer than the 48", False),  # found by any use, at once
    "truncated-restart": (_truncate, "fewer than the 48", True),  # listed corrupt by a starting shard
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_gallery_damaged_on_one_shard_is_quarantined_as_a_whole(tmp_path: Path, damage: str) -> None:
    store = _start(tmp_path)
    ids = _fill(store, "g", 4)
    _fill(store, "intact", 2)  # listed after "g": a starting shard meets the damaged one first
    on_0 = [i for batch in ids for i in batch if _holds(_part(tmp_path, 0), "g", i)]
    assert len(on_0) == 4  # both shards hold half of "g"
    harm, words, restart = DAMAGES[damage]
    harm(shard_root(tmp_path, 1, SHARDS) / "g" / "vectors.f32")
    if restart:
        store = _start(tmp_path)

    for entries in (store.verify_all(), store.list()):
        by_name = {e.name: e for e in entries}
        bad, intact = by_name["g"], by_name["intact"]
        assert isinstance(bad, CorruptGallery), bad
        assert words in bad.reason and bad.reason.endswith("(in shard-1-of-2)"), bad.reason
        assert bad.info is not None and bad.info.count == 8  # what could still be read, of every shard
        assert isinstance(intact, GalleryInfo) and intact.count == 4

    q = _vecs(1, 9)
    refused = {  # reads and writes of the part on shard 0 too, which is intact
        "get": lambda: store.get("g"),
        "search": lambda: store.search("g", q, 5, query_kind="captions", model=MODEL),
        "get_item on shard 0": lambda: store.get_item("g", on_0[0]),
        "add_items": lambda: store.add("g", _vecs(1, 7), ids=["new"], model=MODEL),
        "delete_item on shard 0": lambda: store.delete_item("g", on_0[0]),
        "create exist_ok": lambda: store.create("g", kind="images", model=MODEL, exist_ok=True),
    }
    for what, call in refused.items():
        try:
            call()
        except GalleryCorruptError as exc:
            assert words in str(exc) and str(exc).endswith("(in shard-1-of-2)"), (what, str(exc))
        else:
            pytest.fail(f"{what} was not refused")
    assert _holds(_part(tmp_path, 0), "g", on_0[0])  # the refused delete did nothing
    assert _part(tmp_path, 0).get("g").count == 4  # nor the refused add

    hits = store.search("intact", q, 10, query_kind="captions", model=MODEL)["results"][0]
    assert len(hits) == 4  # every other gallery serves
    store.remove("g")  # a damaged gallery can still be removed
    assert [e.name for e in store.list()] == ["intact"]


def test_a_shard_that_lost_its_part_answers_503_never_a_partial_result(tmp_path: Path) -> None:
    """Shard 1 restarted where its directory is not (its part of the gallery gone): reads refuse with
    shard_unavailable instead of answering from shard 0's half."""
    store = _start(tmp_path)
    _fill(store, "g", 3)
    q = _vecs(1, 9)
    assert len(store.search("g", q, 10, query_kind="captions", model=MODEL)["results"][0]) == 6
    shutil.rmtree(shard_root(tmp_path, 1, SHARDS) / "g")
    store = _start(tmp_path)
    with pytest.raises(ShardUnavailableError, match="shard-1-of-2"):
        store.search("g", q, 10, query_kind="captions", model=MODEL)
    with pytest.raises(ShardUnavailableError):
        store.get("g")


def test_leftovers_are_cleaned_on_every_shard(tmp_path: Path) -> None:
    store = _start(tmp_path)
    for i in range(SHARDS):
        part = shard_root(tmp_path, i, SHARDS)
        (part / ".x.creating-dead").mkdir(parents=True)  # a create that crashed: its lock not held
        (part / ".x.creating-dead" / "write.lock").touch()
        (part / ".y.removed-0").mkdir()  # a remove that crashed
    live = shard_root(tmp_path, 1, SHARDS) / ".z.creating-live"  # a create still running (lock held)
    live.mkdir()
    fd = os.open(live / "write.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sorted(store.clean_leftovers()) == [
            f"shard-{i}-of-2/{name}" for i in range(SHARDS) for name in (".x.creating-dead", ".y.removed-0")
        ]
        assert live.is_dir()
    finally:
        os.close(fd)
    assert sorted(p.name for i in range(SHARDS) for p in shard_root(tmp_path, i, SHARDS).iterdir()) == [
        ".z.creating-live"
    ]


def _make_legacy(gallery: Path, pin: str) -> None:
    """A gallery made before model identities: its model pinned by a manifest's sha256."""
    db = sqlite3.connect(gallery / "gallery.sqlite")
    try:
        meta = json.loads(db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()[0])
        meta.pop("model_identity", None)
        meta["model_sha256"] = pin
        db.execute("UPDATE meta SET value = ? WHERE key = 'info'", (json.dumps(meta),))
        db.commit()
    finally:
        db.close()


def test_the_model_identity_is_checked_and_adopted_on_every_shard(tmp_path: Path) -> None:
    store = _start(tmp_path)
    store.create("old", kind="images", model=MODEL)
    store.add("old", _vecs(3, 0), ids=["a", "b", "c"], model=MODEL)  # shard 0 (both empty)
    store.add("old", _vecs(1, 1), ids=["d"], model=MODEL)  # shard 1: fewer rows
    pin = "ab" * 32
    for i in range(SHARDS):
        _make_legacy(shard_root(tmp_path, i, SHARDS) / "old", pin)
    store = _start(tmp_path)
    legacy = ModelRef(name="m", identity="1" * 64, family="order-embedding", method="order", dim=3,
                      legacy_pins=frozenset({pin}))  # fmt: skip
    other = ModelRef(name="m", identity="2" * 64, family="order-embedding", method="order", dim=3)

    with pytest.raises(GalleryMismatchError):
        store.add("old", _vecs(1, 2), ids=["x"], model=other)
    with pytest.raises(GalleryMismatchError):
        store.search("old", _vecs(1, 3), 5, query_kind="captions", model=other)
    assert store.get("old").count == 4 and store.get("old").model_identity is None

    store.add("old", _vecs(1, 4), ids=["e"], model=legacy)  # written on shard 1 (fewer rows)
    assert [_part(tmp_path, i).get("old").count for i in range(SHARDS)] == [3, 2]
    assert [_part(tmp_path, i).get("old").model_identity for i in range(SHARDS)] == [legacy.identity] * 2
    assert store.get("old").model_identity == legacy.identity  # what GET /galleries/old shows


def test_an_add_returns_the_live_items_at_its_commit_as_one_store_does(tmp_path: Path) -> None:
    """``add``'s count is the gallery's at the add's own commit (``GalleryStore.add``), never one read after
    it that includes other writers' items: concurrent adds of one item each report 1..N, each once."""
    from concurrent.futures import ThreadPoolExecutor

    store = _start(tmp_path)
    store.create("g", kind="images", model=MODEL)
    writers, adds = 8, 10

    def write(w: int) -> list[int]:
        return [
            store.add("g", _vecs(1, 10 * w + a), ids=[f"{w}-{a}"], model=MODEL).count for a in range(adds)
        ]

    with ThreadPoolExecutor(writers) as pool:
        counts = [c for mine in pool.map(write, range(writers)) for c in mine]
    assert sorted(counts) == list(range(1, writers * adds + 1)), counts
    assert store.get("g").count == writers * adds
