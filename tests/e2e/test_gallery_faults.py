"""Gallery storage faults and lifecycle through a real ``lnserve serve`` and the real CLI, on real files
damaged on disk: a damaged gallery is quarantined (listed with its reason, 503 ``gallery_corrupt`` on every
use) while every other gallery, the encoders and ``/health`` keep serving; a short vector file is never
zero-filled; ``gallery check`` / ``repair`` verify and cut back to the last consistent state; ``lnserve
export`` no longer orphans the galleries of the model it exports.

The galleries are built in-process through the store with the real model (quick), then damaged, then
served or checked by separate processes.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.engine import Engine
from lnserve.hashing import sha256_file
from tests.conftest import LEGACY, golden, inputs, run_cli
from tests.e2e.server import start_server

MODEL = "oe_order_gru"
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")  # (12, dim_image)
CAPTIONS: list[str] = inputs()["order_embedding"]["captions"]
BATCH = 4  # items per add: each add is one checksummed block of rows
NEW_ITEM = {"items": [{"id": "new", "image": IMAGES[0].tolist()}]}


def _build(root: Path, artifact: Path, names: list[str]) -> tuple[ModelRef, int]:
    """Images galleries of the 12 fixture images embedded by the real model, 3 adds of 4 each (the store's
    public API only, so that these tests also run against older versions)."""
    engine = Engine.open(artifact, backend="torch")
    ref = ModelRef.from_artifact(engine.artifact)
    vecs = engine.encode_images(IMAGES)
    store = GalleryStore(root, scorer="numpy")
    for name in names:
        store.create(name, kind="images", model=ref)
        for start in range(0, len(IMAGES), BATCH):
            rows = range(start, start + BATCH)
            store.add(name, vecs[start : start + BATCH], ids=[f"img{j}" for j in rows],
                            payloads=[{"j": j} for j in rows])  # fmt: skip
    return ref, vecs.shape[1]


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    try:
        for statement in statements:
            db.execute(statement)
        db.commit()
    finally:
        db.close()


def _make_legacy(gdir: Path, manifest_sha256: str) -> None:
    """Turn a gallery into one written before checksums and model identities (no ``blocks`` table; the
    model pinned by its manifest's sha256), as older lnserve versions left them."""
    db = sqlite3.connect(gdir / "gallery.sqlite")
    try:
        meta = json.loads(db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()[0])
        meta.pop("model_identity", None)
        meta["model_sha256"] = manifest_sha256
        db.execute("UPDATE meta SET value = ? WHERE key = 'info'", (json.dumps(meta),))
        db.execute("DROP TABLE IF EXISTS blocks")
        db.commit()
    finally:
        db.close()


def _flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def _write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


DAMAGED = ["db-empty", "db-garbage", "meta-not-json", "db-deleted", "lock-deleted", "vectors-deleted",
           "vectors-short", "bit-rot", "nan-bytes"]  # fmt: skip


def _damages(root: Path, row_bytes: int) -> dict[str, tuple[Callable[[], None], str]]:
    """Gallery name -> (how it is damaged, words the reported reason must contain)."""

    def db(name: str) -> Path:
        return root / name / "gallery.sqlite"

    def vec(name: str) -> Path:
        return root / name / "vectors.f32"

    return {
        "db-empty": (lambda: os.truncate(db("db-empty"), 0), "gallery.sqlite is unreadable"),
        "db-garbage": (lambda: _write_at(db("db-garbage"), 0, b"\x00garbage!" * 12), "not a database"),
        "meta-not-json": (
            lambda: _sql(db("meta-not-json"), "UPDATE meta SET value = '{\"kind\": ' WHERE key = 'info'"),
            "not JSON",
        ),
        "db-deleted": (lambda: db("db-deleted").unlink(), "gallery.sqlite is missing"),
        "lock-deleted": (lambda: (root / "lock-deleted" / "write.lock").unlink(), "write.lock is missing"),
        "vectors-deleted": (lambda: vec("vectors-deleted").unlink(), "vectors.f32 is missing"),
        "vectors-short": (lambda: os.truncate(vec("vectors-short"), 5 * row_bytes), "truncated"),
        "bit-rot": (lambda: _flip_bit(vec("bit-rot"), 9 * row_bytes + 7), "do not match their checksum"),
        "nan-bytes": (
            lambda: _write_at(vec("nan-bytes"), 5 * row_bytes, np.full(3, np.nan, "<f4").tobytes()),
            "do not match their checksum",
        ),
    }


def test_damaged_galleries_are_quarantined_while_the_rest_serves(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "galleries"
    artifact = artifacts[MODEL]
    names = ["fine", "legacy", *DAMAGED]
    ref, dim = _build(root, artifact, names)
    row_bytes = 4 * dim
    _make_legacy(root / "legacy", sha256_file(artifact / "manifest.json"))
    damages = _damages(root, row_bytes)
    assert list(damages) == DAMAGED
    for damage, _ in damages.values():
        damage()
    short_size = (root / "vectors-short" / "vectors.f32").stat().st_size
    leftover = root / ".fine.creating-crashed"  # a create interrupted by a crash: cleaned at start
    leftover.mkdir()
    (leftover / "write.lock").touch()
    (root / ".gone.removed-0123").mkdir()

    srv = start_server(tmp_path, "--models", str(artifact), env={"LNSERVE_SCORER": "numpy"})
    try:
        with httpx.Client(base_url=srv.url, timeout=60.0) as c:
            assert c.get("/health").status_code == 200
            assert c.post("/encode", json={"sentences": ["a dog"]}).status_code == 200
            listed = {g["name"]: g for g in c.get("/galleries").json()["galleries"]}
            summary = {g["name"]: g for g in c.get("/info").json()["galleries"]}
            assert set(listed) == set(summary) == set(names)
            for name, (_, words) in damages.items():
                for entry in (listed[name], summary[name]):
                    assert entry["state"] == "corrupt" and words in entry["reason"], (name, entry)
                calls = [
                    c.post("/retrieve", json={"gallery": name, "query": {"text": "a dog"}}),
                    c.post(f"/galleries/{name}/items", json=NEW_ITEM),
                    c.get(f"/galleries/{name}"),
                    c.get(f"/galleries/{name}/items/img0"),
                    c.delete(f"/galleries/{name}/items/img1"),
                    c.post("/retrieve", json={"gallery": "fine", "query": {"id": "img0", "gallery": name}}),
                ]
                for r in calls:
                    assert r.status_code == 503, (name, r.request.url, r.text)
                    error = r.json()["error"]
                    assert (
                        error["code"] == "gallery_corrupt"
                        and words in error["message"]
                        and error["request_id"]
                    )
            # a short vector file is refused for writes, never extended with zeros, and stays refused
            assert (root / "vectors-short" / "vectors.f32").stat().st_size == short_size
            again = c.post("/retrieve", json={"gallery": "vectors-short", "query": {"text": "a dog"}})
            assert again.status_code == 503
            # every other gallery serves, with the fidelity of the model (golden ranking of a caption)
            errs = golden(MODEL)["errs"]
            for name in ("fine", "legacy"):
                assert listed[name]["state"] == "ok" and listed[name]["count"] == 12
                body = {"gallery": name, "query": {"text": CAPTIONS[3]}, "k": 12, "pretokenized": True}
                r = c.post("/retrieve", json=body)
                assert r.status_code == 200, r.text
                want = np.argsort(errs[3], kind="stable")
                assert [h["id"] for h in r.json()["results"]] == [f"img{j}" for j in want]
                assert c.post(f"/galleries/{name}/items", json=NEW_ITEM).status_code == 200
            # the legacy gallery got its model identity once used with its model
            assert c.get("/galleries/legacy").json()["model_identity"] == ref.identity
            # damage while serving is found on the next read: a deleted vector file, not a 500
            (root / "fine" / "vectors.f32").unlink()
            r = c.post("/retrieve", json={"gallery": "fine", "query": {"text": "a dog"}})
            assert r.status_code == 503 and "vectors.f32 is missing" in r.json()["error"]["message"]
            assert c.get("/health").status_code == 200 and c.get("/ready").status_code == 200
        assert not leftover.exists() and not (root / ".gone.removed-0123").exists()
        log = srv.log()
        assert all(f"gallery {name} is corrupt and quarantined" in log for name in damages), log
        assert "Traceback" not in log
    finally:
        srv.stop()
    # the legacy gallery's rows now carry checksums (recorded at start-up, after a finite-values check)
    db = sqlite3.connect(root / "legacy" / "gallery.sqlite")
    try:
        assert db.execute("SELECT sum(n) FROM blocks").fetchone()[0] == 13
    finally:
        db.close()


def _check(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    return run_cli("gallery", "check", name, "--galleries-dir", str(root))


def _one_error_line(proc: subprocess.CompletedProcess[str], code: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lnserve: error [{code}]: "), proc.stderr
    return lines[0]


def test_gallery_check_and_repair(artifacts: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "galleries"
    ref, dim = _build(root, artifacts[MODEL], ["fine", "rot", "short", "nolock", "legacy", "nodb"])
    row_bytes = 4 * dim
    _make_legacy(root / "legacy", sha256_file(artifacts[MODEL] / "manifest.json"))
    _flip_bit(root / "rot" / "vectors.f32", 9 * row_bytes)  # third add: rows 8-11
    os.truncate(root / "short" / "vectors.f32", 6 * row_bytes)  # inside the second add: rows 4-7
    (root / "nolock" / "write.lock").unlink()
    os.truncate(root / "nodb" / "gallery.sqlite", 0)

    ok = _check(root, "fine")
    assert ok.returncode == 0 and "gallery fine: ok (12 items in 12 rows, 12 verified" in ok.stdout, ok.stderr
    legacy = _check(root, "legacy")
    assert legacy.returncode == 0 and "12 rows predate checksums" in legacy.stdout, legacy.stderr

    line = _one_error_line(_check(root, "rot"), "gallery_corrupt")
    assert "rows 8-11 do not match their checksum" in line and "keeps rows 0-7" in line
    dry = run_cli("gallery", "repair", "rot", "--dry-run", "--galleries-dir", str(root), check=True)
    assert "would drop rows 8-11 (4 items: img8, img9, img10, img11)" in dry.stdout
    _one_error_line(_check(root, "rot"), "gallery_corrupt")  # a dry run changes nothing
    fixed = run_cli("gallery", "repair", "rot", "--json", "--galleries-dir", str(root), check=True)
    report = json.loads(fixed.stdout)
    assert report["dropped_ids"] == ["img8", "img9", "img10", "img11"] and report["rows_after"] == 8
    assert _check(root, "rot").returncode == 0
    assert (root / "rot" / "vectors.f32").stat().st_size == 8 * row_bytes

    line = _one_error_line(_check(root, "short"), "gallery_corrupt")
    assert "vectors.f32 ends inside rows 4-7" in line
    fixed = run_cli("gallery", "repair", "short", "--galleries-dir", str(root), check=True)
    assert "dropped rows 4-11 (8 items: img4, img5" in fixed.stdout and "4 rows kept" in fixed.stdout
    assert _check(root, "short").returncode == 0

    assert "write.lock is missing" in _one_error_line(_check(root, "nolock"), "gallery_corrupt")
    fixed = run_cli("gallery", "repair", "nolock", "--galleries-dir", str(root), check=True)
    assert "recreated write.lock" in fixed.stdout and "dropped" not in fixed.stdout
    assert _check(root, "nolock").returncode == 0

    nothing = run_cli("gallery", "repair", "fine", "--galleries-dir", str(root), check=True)
    assert "nothing to repair" in nothing.stdout
    line = _one_error_line(
        run_cli("gallery", "repair", "nodb", "--galleries-dir", str(root)), "gallery_corrupt"
    )
    assert "cannot rebuild the database" in line
    _one_error_line(_check(root, "nodb"), "gallery_corrupt")
    _one_error_line(_check(root, "absent"), "gallery_not_found")
    _one_error_line(_check(root, "bad\n"), "invalid_input")

    ls = run_cli("gallery", "ls", "--galleries-dir", str(root), check=True).stdout
    assert "nodb" in ls and "CORRUPT: gallery.sqlite is unreadable" in ls
    # the repaired galleries serve what they kept, through the store of another process
    store = GalleryStore(root, scorer="numpy")
    hits = store.search("rot", np.zeros(dim, np.float32), 20, query_kind="captions", model=ref)["results"][0]
    assert sorted(h["id"] for h in hits) == sorted(f"img{j}" for j in range(8))


def test_export_keeps_the_models_galleries(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """``lnserve export`` rewrites manifest.json: galleries pin the model's identity (weights, vocabulary,
    cell, options), so they keep working; one made before identities (pinning the manifest's bytes) too."""
    model = tmp_path / "model"
    shutil.copytree(artifacts[MODEL], model)  # export writes into the artifact
    root = tmp_path / "galleries"
    ref, _ = _build(root, model, ["new", "old"])
    before = sha256_file(model / "manifest.json")
    _make_legacy(root / "old", before)
    run_cli("export", str(model), check=True)
    assert sha256_file(model / "manifest.json") != before  # export rewrote the manifest

    srv = start_server(tmp_path, "--models", str(model), env={"LNSERVE_SCORER": "numpy"})
    try:
        with httpx.Client(base_url=srv.url, timeout=60.0) as c:
            want = np.argsort(golden(MODEL)["errs"][7], kind="stable")
            for name in ("new", "old"):
                body = {"gallery": name, "query": {"text": CAPTIONS[7]}, "k": 12, "pretokenized": True}
                r = c.post("/retrieve", json=body)
                assert r.status_code == 200, r.text
                assert [h["id"] for h in r.json()["results"]] == [f"img{j}" for j in want]
            assert c.get("/galleries/old").json()["model_identity"] == ref.identity  # migrated on use
    finally:
        srv.stop()
