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
    GalleryCorruptError,
    GalleryExistsError,
    GalleryInputError,
    GalleryMismatchError,
    GalleryNotFoundError,
    ItemNotFoundError,
)
from lnserve.app.galleries.layout import MAX_K
from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.http.errors import http_status
from lnserve.app.runtime.engine import Engine
from tests.conftest import LEGACY, OE_MODELS, golden, inputs
from tests.support.gallery_opens import count_gallery_opens

REPO = Path(__file__).resolve().parents[4]


def _store(tmp_path: Path) -> GalleryStore:
    return GalleryStore(tmp_path / "galleries", scorer="numpy")


def _toy_model(dim: int = 8, sha: str = "a" * 64) -> ModelRef:
    return ModelRef(name="toy", identity=sha, family="order-embedding", method="order", dim=dim)


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
    store.add("ims", imgs, ids=[f"i{j}" for j in range(len(imgs))])
    store.create("caps", kind="captions", model=ref)
    store.add("caps", sent, ids=[f"c{j}" for j in range(len(sent))], payloads=[{"n": j} for j in range(40)])

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
    store.add("st", vecs, payloads=[{"text": s} for s in sents])
    out = store.search("st", vecs[4], 3, query_kind="captions")
    assert out["score"] == {
        "metric": "cosine",
        "direction": "higher_is_better",
        "meaning": "cosine similarity (1 = identical direction)",
    }
    top = out["results"][0]
    assert top[0]["payload"]["text"] == sents[4] and top[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert top[0]["score"] >= top[1]["score"] >= top[2]["score"]


def test_persistence_across_reopen_and_deletes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vecs = np.abs(rng.standard_normal((30, 8))).astype(np.float32)
    store = _store(tmp_path)
    store.create("g", kind="images", model=_toy_model())
    store.add("g", vecs, ids=[str(i) for i in range(30)], payloads=[{"url": f"u{i}"} for i in range(30)])
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
        store.add("g", vecs, ids=[f"{b}-{i}" for i in range(50)], payloads=[{"b": b}] * 50)
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
    reopened.add("g", extra, ids=["after"])
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
                store.add("g", vecs, ids=[f"{w}-{b}-{i}" for i in range(20)])
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
    store.add("g", np.ones((2, 8), np.float32), ids=["a", "b"])
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
        (lambda: store.add("g", np.full((1, 8), np.nan)), GalleryInputError, 422),
        (lambda: store.add("g", np.ones((1, 8)), kind="captions"), GalleryMismatchError, 422),
        (lambda: store.add("g", np.ones((1, 8)), ids=["a"]), DuplicateItemError, 409),
        (lambda: store.add("g", np.ones((2, 8)), ids=["x", "x"]), DuplicateItemError, 409),
        (lambda: store.add("g", np.ones((1, 8)), payloads=[{1j}]), GalleryInputError, 422),
        (lambda: store.delete_item("g", "zz"), ItemNotFoundError, 404),
        (lambda: store.create("g", kind="images", model=_toy_model()), GalleryExistsError, 409),
        (lambda: store.create("../evil", kind="images", model=_toy_model()), GalleryInputError, 422),
        (lambda: store.create("evil\n", kind="images", model=_toy_model()), GalleryInputError, 422),
        (lambda: store.get("g\n"), GalleryInputError, 422),
        (lambda: store.create("h", kind="videos", model=_toy_model()), GalleryInputError, 422),
        (lambda: store.remove("nope"), GalleryNotFoundError, 404),
    ]
    for call, error, status in cases:
        with pytest.raises(error) as info:
            call()
        assert http_status(info.value) == status and info.value.exit_code == 2 and info.value.code
    assert store.get("g").count == 2  # nothing above changed the gallery
    assert sorted(p.name for p in store.root.iterdir()) == ["g"]  # no "evil\n" directory


def test_one_gallery_name_rule_matched_whole_by_store_and_schema() -> None:
    """``$`` matches before a trailing newline: names must be matched whole everywhere, by one pattern."""
    from pydantic import ValidationError

    from lnserve.app.galleries.rules import check_gallery_name
    from lnserve.app.http.schemas.retrieval import GalleryCreate

    for bad in ("evil\n", "a\nb", "", ".hidden", "a" * 129, "x/y"):
        with pytest.raises(GalleryInputError):
            check_gallery_name(bad)
        with pytest.raises(ValidationError):
            GalleryCreate(name=bad, kind="images")
    for good in ("a", "coco-ims_2014.v1", "9" * 128):
        assert check_gallery_name(good) == good and GalleryCreate(name=good, kind="images").name == good


# -- storage faults: detected and refused, never served nor "healed" ---------------------------------------
def _three_adds(tmp_path: Path, name: str = "g") -> tuple[GalleryStore, np.ndarray]:
    """A gallery of 12 rows written by 3 adds (3 checksummed blocks), and its vectors."""
    store = _store(tmp_path)
    store.create(name, kind="images", model=_toy_model())
    vecs = np.abs(np.random.default_rng(1).standard_normal((12, 8))).astype(np.float32)
    for b in range(3):
        store.add(name, vecs[4 * b : 4 * b + 4], ids=[str(i) for i in range(4 * b, 4 * b + 4)])
    return store, vecs


def test_a_short_vector_file_is_refused_never_zero_filled(tmp_path: Path) -> None:
    store, _ = _three_adds(tmp_path)
    path = store.root / "g" / "vectors.f32"
    os.truncate(path, 5 * 4 * 8)  # below the 12 acknowledged rows
    reopened = _store(tmp_path)
    with pytest.raises(GalleryCorruptError) as info:
        reopened.add("g", np.ones((1, 8), np.float32), ids=["x"])
    assert http_status(info.value) == 503 and info.value.exit_code == 2 and "truncated" in str(info.value)
    assert path.stat().st_size == 5 * 4 * 8  # nothing written, nothing padded with zeros
    with pytest.raises(GalleryCorruptError):
        reopened.search("g", np.ones(8, np.float32), 3, query_kind="captions")
    assert reopened.list()[0].as_dict()["state"] == "corrupt"


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _write_nan(path: Path, row: int) -> None:
    with open(path, "r+b") as f:
        f.seek(row * 32)
        f.write(np.full(8, np.nan, "<f4").tobytes())


_FAULTS = {
    "bit rot": (lambda g: _flip(g / "vectors.f32", 9 * 32 + 2), "rows 8-11 do not match their checksum"),
    "nan bytes": (lambda g: _write_nan(g / "vectors.f32", row=1), "rows 0-3 do not match their checksum"),
    "vectors deleted": (lambda g: (g / "vectors.f32").unlink(), "vectors.f32 is missing"),
    "database deleted": (lambda g: (g / "gallery.sqlite").unlink(), "gallery.sqlite is missing"),
    "database emptied": (lambda g: os.truncate(g / "gallery.sqlite", 0), "gallery.sqlite is unreadable"),
    "lock deleted": (lambda g: (g / "write.lock").unlink(), "write.lock is missing"),
}


@pytest.mark.parametrize("fault", list(_FAULTS))
def test_damage_is_reported_as_corrupt_not_absent_nor_internal(fault: str, tmp_path: Path) -> None:
    store, vecs = _three_adds(tmp_path)
    store.create("other", kind="images", model=_toy_model())
    damage, reason = _FAULTS[fault]
    damage(store.root / "g")
    reopened = _store(tmp_path)
    calls = [
        lambda: reopened.get("g"),
        lambda: reopened.search("g", vecs[:2], 3, query_kind="captions"),
        lambda: reopened.get_item("g", "9", with_vector=True),
        lambda: reopened.add("g", vecs[:1], ids=["new"]),
        lambda: reopened.delete_item("g", "1"),
    ]
    for call in calls:
        with pytest.raises(GalleryCorruptError) as info:
            call()
        assert reason in info.value.reason and http_status(info.value) == 503
    listed = {e.name: e.as_dict() for e in reopened.list() + reopened.verify_all()}
    assert listed["g"]["state"] == "corrupt" and reason in listed["g"]["reason"]
    assert listed["other"]["state"] == "ok" and reopened.get("other").count == 0  # the others serve


def test_repair_keeps_the_blocks_before_the_damage(tmp_path: Path) -> None:
    store, vecs = _three_adds(tmp_path)
    _flip(store.root / "g" / "vectors.f32", 5 * 32)  # second add: rows 4-7
    report = store.check("g")
    assert (report.ok, report.good_rows, report.verified_rows) == (False, 4, 4)
    assert store.repair("g", dry_run=True).dropped_ids == [str(i) for i in range(4, 12)]
    assert not store.check("g").ok  # a dry run changes nothing
    repaired = store.repair("g")
    assert (repaired.rows_before, repaired.rows_after) == (12, 4) and len(repaired.dropped_ids) == 8
    assert store.check("g").ok and store.get("g").count == 4
    store.add("g", vecs[4:6], ids=["4", "5"])  # the dropped ids can be added again
    hits = store.search("g", np.zeros(8, np.float32), 10, query_kind="captions")["results"][0]
    assert sorted(h["id"] for h in hits) == ["0", "1", "2", "3", "4", "5"]
    assert store.get_item("g", "5", with_vector=True)["vector"].tolist() == vecs[5].tolist()
    assert not store.repair("g").changed


def test_leftovers_of_crashed_creations_are_cleaned_but_not_a_live_one(tmp_path: Path) -> None:
    import fcntl

    store, _ = _three_adds(tmp_path)
    crashed = store.root / ".h.creating-abc"
    crashed.mkdir()
    (crashed / "write.lock").touch()
    trash = store.root / ".g2.removed-0f"
    trash.mkdir()
    live = store.root / ".i.creating-def"  # another process is creating it right now: lock held
    live.mkdir()
    fd = os.open(live / "write.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sorted(store.clean_leftovers()) == [".g2.removed-0f", ".h.creating-abc"]
        assert live.is_dir() and not crashed.exists() and not trash.exists()
    finally:
        os.close(fd)
    assert store.clean_leftovers() == [".i.creating-def"]
    assert [e.name for e in store.list()] == ["g"]


def test_legacy_gallery_gets_checksums_and_its_model_identity(tmp_path: Path) -> None:
    """A gallery of an older lnserve (no checksums; model pinned by manifest sha256) keeps working."""
    import json
    import sqlite3

    store, vecs = _three_adds(tmp_path)
    manifest_sha = "c" * 64
    db = sqlite3.connect(store.root / "g" / "gallery.sqlite")
    meta = json.loads(db.execute("SELECT value FROM meta").fetchone()[0])
    meta.pop("model_identity")
    db.execute("UPDATE meta SET value = ?", (json.dumps({**meta, "model_sha256": manifest_sha}),))
    db.execute("DROP TABLE blocks")
    db.commit()
    db.close()
    old = _store(tmp_path)
    report = old.check("g")
    assert report.ok and (report.legacy_rows, report.verified_rows) == (12, 0)
    assert old.get("g").model_identity is None
    other = ModelRef("toy", "d" * 64, "order-embedding", "order", 8, legacy_pins=frozenset({"e" * 64}))
    with pytest.raises(GalleryMismatchError):
        old.search("g", vecs[0], 3, query_kind="captions", model=other)
    same = ModelRef("toy", "d" * 64, "order-embedding", "order", 8, legacy_pins=frozenset({manifest_sha}))
    assert len(old.search("g", vecs[0], 3, query_kind="captions", model=same)["results"][0]) == 3
    assert old.get("g").model_identity == "d" * 64  # pinned by identity from now on
    assert old.verify_all()[0].name == "g"  # records the missing checksums
    report = old.check("g")
    assert (report.legacy_rows, report.verified_rows) == (0, 12)
    _flip(old.root / "g" / "vectors.f32", 3)
    assert not _store(tmp_path).check("g").ok  # bit rot in a formerly legacy row is now detected


def test_a_gallery_repaired_by_another_process_is_served_afresh(tmp_path: Path) -> None:
    """The server's cached rows, mask and verification never outlive a repair, even when the gallery
    regains the same row and tombstone counts afterwards."""
    server, vecs = _three_adds(tmp_path)
    server.delete_item("g", "10")
    assert {h["id"] for h in server.search("g", vecs[0], 12, query_kind="captions")["results"][0]} == {
        str(i) for i in range(12) if i != 10
    }
    os.truncate(server.root / "g" / "vectors.f32", 6 * 32)
    with pytest.raises(GalleryCorruptError):
        server.search("g", vecs[0], 12, query_kind="captions")
    cli = _store(tmp_path)
    assert cli.repair("g").rows_after == 4
    fresh = vecs[::-1][:8].copy()
    cli.add("g", fresh, ids=[f"n{i}" for i in range(4, 12)])
    cli.delete_item("g", "n9")  # again 12 rows, 1 tombstone: other rows than before
    hits = server.search("g", vecs[0], 12, query_kind="captions")["results"][0]
    assert {h["id"] for h in hits} == {"0", "1", "2", "3"} | {f"n{i}" for i in range(4, 12) if i != 9}
    assert server.get_item("g", "n10", with_vector=True)["vector"].tolist() == fresh[6].tolist()


def test_a_search_opens_and_checks_the_gallery_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each open re-reads the counters and re-stats the files under the gallery's lock; a query used to do it
    twice (once for the identity, once for the row map)."""
    store, vecs = _three_adds(tmp_path)
    opens = count_gallery_opens(monkeypatch)
    for _ in range(2):  # the first search builds the row map, the second reuses it
        opens.clear()
        out = store.search("g", vecs[:2], 3, query_kind="captions", model=_toy_model())
        assert len(out["results"]) == 2 and opens == ["g"]


def _cosine_reference(vectors: np.ndarray, live: np.ndarray, queries: np.ndarray, k: int) -> list[list]:
    """A fresh computation: the former cosine formula over every row, deleted rows dropped, stable sort."""
    from lnserve.app.runtime.retrieval import dot_scores, row_norms

    with np.errstate(divide="ignore", invalid="ignore"):
        qn = queries / row_norms(queries)[:, None]
        scores = np.nan_to_num(dot_scores(qn, vectors) / row_norms(vectors)[None, :], nan=0.0)
    scores[:, ~live] = -np.inf
    out = []
    for row in scores:
        order = [int(i) for i in np.argsort(-row, kind="stable")[:k] if live[i]]
        out.append([(str(i), float(row[i])) for i in order])
    return out


def test_cosine_search_with_kept_norms_equals_a_fresh_computation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Add, search, delete, add again, search: each row is normed once per process, and every answer
    (ids and float32 scores) equals a fresh computation, in this process and in a freshly opened store."""
    from lnserve.app.galleries import search as search_module
    from lnserve.app.runtime.retrieval import row_norms

    normed: list[int] = []

    def counting(x: np.ndarray) -> np.ndarray:
        normed.append(len(x))
        return row_norms(x)

    monkeypatch.setattr(search_module, "row_norms", counting)  # a spy: the real function answers
    rng = np.random.default_rng(5)
    dim, k = 40, 12
    vecs = rng.standard_normal((90, dim)).astype(np.float32)
    vecs *= (10.0 ** rng.integers(-3, 3, size=(90, 1))).astype(np.float32)
    vecs[[4, 60]] = 0.0
    vecs[20:26] = vecs[3]  # planted ties
    vecs[70] = vecs[3] * np.float32(2.0)
    queries = np.concatenate([vecs[3:4], rng.standard_normal((4, dim)).astype(np.float32)])
    model = ModelRef(name="st", identity="b" * 64, family="skip-thoughts", method="cosine", dim=dim)
    store = _store(tmp_path)
    store.create("g", kind="captions", model=model)
    live = np.zeros(90, dtype=bool)

    def check(s: GalleryStore, n: int) -> None:
        got = s.search("g", queries, k, query_kind="captions", model=model)
        assert got["score"]["metric"] == "cosine"
        have = [[(h["id"], h["score"]) for h in row] for row in got["results"]]
        assert have == _cosine_reference(vecs[:n], live[:n], queries, k)

    store.add("g", vecs[:50], ids=[str(i) for i in range(50)])
    live[:50] = True
    check(store, 50)
    for i in (3, 21, 0):
        store.delete_item("g", str(i))
        live[i] = False
    check(store, 50)
    store.add("g", vecs[50:], ids=[str(i) for i in range(50, 90)])
    live[50:] = True
    check(store, 90)
    check(store, 90)
    assert sum(normed) == 90  # each row once: deletes and repeated searches norm nothing again
    check(_store(tmp_path), 90)
