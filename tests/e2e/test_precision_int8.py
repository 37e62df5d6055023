"""The int8 profile end to end, from outside: real ``lnserve serve`` processes on loopback serving the demo
model (or a legacy fixture) at int8 and at fp32, and the real CLI.

* Vectors: every route that encodes text (``/encode``, ``/v1/embeddings``, TEI's ``/embed``) answers int8
  vectors whose cosine to the fp32 server's is >= 0.999 each, and not the fp32 ones.
* What is served is shown: ``/info`` (``precision``, TEI's ``model_dtype``), ``/models`` (``precision``,
  ``graph``) and the front page's models table; ``--precision`` on ``lnserve serve`` as ``LNSERVE_PRECISION``.
* Galleries stay honest across precisions (one galleries directory, servers run one after the other): a
  caption gallery is pinned to the precision of its vectors (refused, 422 ``gallery_mismatch`` naming both
  precisions, for searches and adds at another one); an image gallery is float32 in fp32 and int8 alike and
  serves both; the demo gallery is not rebuilt when the server restarts at int8 (fp16 pins its images too,
  and its demo gallery serves at fp16).
* ``lnserve gallery build --precision int8`` makes a gallery an int8 server searches and an fp32 one refuses.
* A gallery description on disk pinning a crafted identity is damaged (quarantined), ``<sha256>:int8`` is not.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lnserve.app.demo_model.data import ensure_demo_artifact
from lnserve.app.galleries.demo import shipped_demo
from lnserve.app.runtime.fused_op.loader import fused_op_status
from lnserve.converters.artifact import read_artifact
from lnserve.converters.int8_calibration import calibration_tag
from tests.conftest import LEGACY, golden, inputs, run_cli
from tests.e2e.server import LiveServer, start_server
from tests.support.vector_checks import cosines

COSINE_BAR = 0.999  # the bar for every vector
HEX64 = re.compile(r"[0-9a-f]{64}")
_DEMO = shipped_demo()
_FEATS, _IDS, _PAYLOADS = _DEMO.gallery_data()
SENTENCES: list[str] = [p["description"] for p in _PAYLOADS[:24]]  # the demo world's own captions
FEATURES: np.ndarray = np.asarray(_FEATS[:6], dtype=np.float32)  # image features (dim_image) of that world


def fused_built() -> bool:
    return fused_op_status().library.is_file()


def error_of(r: httpx.Response, status: int, code: str) -> str:
    """The JSON error's message, after checking its status and stable code."""
    assert r.status_code == status, (r.request.url, r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] == code and error["request_id"], error
    return str(error["message"])


def stop_all(*servers: LiveServer) -> None:
    for s in servers:
        s.stop()


# -- one fp32 and one int8 server on the demo model, for the module ---------------------------------
@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    fp32 = start_server(tmp_path_factory.mktemp("fp32"))
    try:
        int8 = start_server(tmp_path_factory.mktemp("int8"), env={"LNSERVE_PRECISION": "int8"})
    except BaseException:
        fp32.stop()
        raise
    try:
        yield {"fp32": fp32, "int8": int8}
    finally:
        stop_all(fp32, int8)
    for s in (fp32, int8):
        assert "Traceback" not in s.log(), s.log()[-4000:]


def _vectors_from(route: str, client: httpx.Client) -> np.ndarray:
    """The vectors of SENTENCES through one route, in its own request and answer shapes."""
    if route == "/encode":
        r = client.post(route, json={"sentences": SENTENCES})
        assert r.status_code == 200, r.text
        return np.asarray(r.json()["vectors"], np.float32)
    if route == "/encode raw":
        r = client.post("/encode", json={"sentences": SENTENCES, "normalize": False})
        assert r.status_code == 200, r.text
        return np.asarray(r.json()["vectors"], np.float32)
    if route == "/v1/embeddings":
        r = client.post(route, json={"input": SENTENCES})
        assert r.status_code == 200, r.text
        return np.asarray([d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])], "f4")
    assert route == "/embed"
    r = client.post(route, json={"inputs": SENTENCES})
    assert r.status_code == 200, r.text
    return np.asarray(r.json(), np.float32)


@pytest.mark.parametrize("route", ["/encode", "/encode raw", "/v1/embeddings", "/embed"])
def test_int8_vectors_within_the_bar_on_every_route(servers: dict[str, LiveServer], route: str) -> None:
    got: dict[str, np.ndarray] = {}
    for precision, server in servers.items():
        with httpx.Client(base_url=server.url, timeout=60.0) as c:
            got[precision] = _vectors_from(route, c)
    exact, int8 = got["fp32"], got["int8"]
    assert int8.shape == exact.shape == (len(SENTENCES), exact.shape[1]) and np.isfinite(int8).all()
    cos = cosines(int8, exact)
    assert cos.min() >= COSINE_BAR, (route, cos.min(), int(cos.argmin()))
    assert not np.array_equal(int8, exact), route  # the int8 graph served, not the exact one


def _models_table(html: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, body rows' cells) of the front page's models table."""
    table = re.search(r'<table id="models">(.*?)</table>', html, re.S)
    assert table, html[:2000]
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    head = re.findall(r"<th>(.*?)</th>", rows[0])
    return head, [re.findall(r"<td>(.*?)</td>", row) for row in rows[1:]]


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", "float32"), ("int8", "int8")])
def test_the_precision_served_is_shown(servers: dict[str, LiveServer], precision: str, dtype: str) -> None:
    with httpx.Client(base_url=servers[precision].url, timeout=60.0) as c:
        info = c.get("/info").json()
        assert info["precision"] == precision and info["model_dtype"] == dtype, info
        (model,) = c.get("/models").json()["models"]
        assert model["precision"] == precision and model["cells"] == {"sentence": "lngru"}, model
        assert model["graph"] == ("fused" if fused_built() else "plain"), model  # int8 keeps the fused step
        assert model["providers"] == ["CPUExecutionProvider"], model
        head, rows = _models_table(c.get("/").text)
        (row,) = rows
        assert row[head.index("precision")] == precision, (head, row)


def test_serve_precision_flag(servers: dict[str, LiveServer], tmp_path: Path) -> None:
    """``lnserve serve --precision int8`` is ``LNSERVE_PRECISION=int8`` (the flag wins over the variable)."""
    server = start_server(tmp_path, "--precision", "int8", env={"LNSERVE_PRECISION": "fp32"})
    try:
        with httpx.Client(base_url=server.url, timeout=60.0) as c:
            assert c.get("/info").json()["precision"] == "int8"
            assert [m["precision"] for m in c.get("/models").json()["models"]] == ["int8"]
            flagged = _vectors_from("/encode", c)
        with httpx.Client(base_url=servers["int8"].url, timeout=60.0) as c:
            np.testing.assert_allclose(flagged, _vectors_from("/encode", c), rtol=0, atol=1e-6)
    finally:
        server.stop()


# -- galleries across precisions: one galleries directory, servers one after the other ---------------
def _usable_here(html: str) -> dict[str, str]:
    """The front page's galleries table: name -> its "usable here" cell, as text."""
    rows = re.findall(r'<tr data-gallery="([^"]+)" data-usable="[a-z]+">(.*?)</tr>', html, re.S)
    return {name: re.sub(r"<[^>]+>", "", re.findall(r"<td>(.*?)</td>", row)[2]) for name, row in rows}


def _retrieve(c: httpx.Client, gallery: str, query: dict[str, Any], k: int = 3) -> httpx.Response:
    return c.post("/retrieve", json={"gallery": gallery, "query": query, "k": k})


def _create(c: httpx.Client, name: str, kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    r = c.post("/galleries", json={"name": name, "kind": kind})
    assert r.status_code == 201, r.text
    added = c.post(f"/galleries/{name}/items", json={"items": items})
    assert added.status_code == 200, added.text
    return c.get(f"/galleries/{name}").json()  # type: ignore[no-any-return]


CAPTIONS = [{"id": f"c{i}", "text": s} for i, s in enumerate(SENTENCES[:8])]
IMAGES = [{"id": f"i{i}", "image": f.tolist()} for i, f in enumerate(FEATURES)]
IMAGE_QUERY = {"image": FEATURES[0].tolist()}
TEXT_QUERY = {"text": SENTENCES[0]}


def _mismatch(r: httpx.Response, gallery_at: str, served_at: str) -> None:
    """A 422 gallery_mismatch whose message names the gallery's precision and the served one."""
    message = error_of(r, 422, "gallery_mismatch")
    assert f"at {gallery_at}" in message and served_at in message, message


def test_galleries_across_precisions(tmp_path: Path) -> None:
    gdir = tmp_path / "galleries"
    env = {"LNSERVE_GALLERIES_DIR": str(gdir)}

    fp32 = start_server(tmp_path, env=env)  # 1: fp32 makes a caption and an image gallery
    try:
        with httpx.Client(base_url=fp32.url, timeout=60.0) as c:
            demo_uid = c.get("/galleries/demo-images").json()["uid"]
            caps32 = _create(c, "caps32", "captions", CAPTIONS)
            imgs32 = _create(c, "imgs32", "images", IMAGES)
            assert (
                HEX64.fullmatch(caps32["model_identity"])
                and imgs32["model_identity"] == caps32["model_identity"]
            )
            assert _retrieve(c, "caps32", IMAGE_QUERY).status_code == 200
    finally:
        fp32.stop()

    int8 = start_server(tmp_path, env={**env, "LNSERVE_PRECISION": "int8"})  # 2: int8, same directory
    try:
        with httpx.Client(base_url=int8.url, timeout=60.0) as c:
            demo = c.get("/galleries/demo-images").json()
            assert demo["uid"] == demo_uid and demo["count"] == len(_IDS)  # not rebuilt
            r = _retrieve(c, "demo-images", TEXT_QUERY, k=5)
            assert r.status_code == 200 and len(r.json()["results"]) == 5, r.text
            # the front page says which galleries this int8 server can search, and why not
            usable = _usable_here(c.get("/").text)
            assert usable["demo-images"] == usable["imgs32"] == "yes", usable
            assert usable["caps32"].startswith("no") and "at fp32" in usable["caps32"], usable
            # the fp32 caption gallery: refused for searches (any query kind) and adds
            _mismatch(_retrieve(c, "caps32", IMAGE_QUERY), "fp32", "int8")
            _mismatch(
                c.post("/galleries/caps32/items", json={"items": [{"text": "a red star"}]}), "fp32", "int8"
            )
            # the fp32 image gallery: the same float32 image vectors, searched and added to at int8
            r = _retrieve(c, "imgs32", TEXT_QUERY, k=len(IMAGES))
            assert r.status_code == 200, r.text
            assert sorted(h["id"] for h in r.json()["results"]) == sorted(i["id"] for i in IMAGES)
            more = {"items": [{"id": "i-int8", "image": FEATURES[1].tolist()}]}
            assert c.post("/galleries/imgs32/items", json=more).status_code == 200
            # a caption gallery made at int8 pins int8, and the shipped demo's calibration (lnserve calibrate)
            caps8 = _create(c, "caps8", "captions", CAPTIONS)
            tag = calibration_tag(read_artifact(ensure_demo_artifact()).manifest)
            assert caps8["model_identity"] == caps32["model_identity"] + ":int8@" + tag, caps8
            r = _retrieve(c, "caps8", IMAGE_QUERY, k=len(CAPTIONS))
            assert r.status_code == 200 and len(r.json()["results"]) == len(CAPTIONS), r.text
            # stored items query across galleries of one profile: int8 captions with float32 images; and
            # fp32 images with fp32 captions (nothing is encoded at int8 there)
            for gallery, query in (("imgs32", {"id": "c0", "gallery": "caps8"}),
                                   ("caps8", {"id": "i0", "gallery": "imgs32"}),
                                   ("caps32", {"id": "i0", "gallery": "imgs32"})):  # fmt: skip
                r = _retrieve(c, gallery, query)
                assert r.status_code == 200 and len(r.json()["results"]) == 3, (gallery, r.text)
    finally:
        int8.stop()

    fp32 = start_server(tmp_path, env=env)  # 3: fp32 again
    try:
        with httpx.Client(base_url=fp32.url, timeout=60.0) as c:
            _mismatch(_retrieve(c, "caps8", IMAGE_QUERY), "int8", "fp32")
            _mismatch(
                c.post("/galleries/caps8/items", json={"items": [{"text": "a red star"}]}), "int8", "fp32"
            )
            assert _retrieve(c, "caps32", IMAGE_QUERY).status_code == 200
            assert c.get("/galleries/imgs32").json()["count"] == len(IMAGES) + 1
            assert c.get("/galleries/demo-images").json()["uid"] == demo_uid
    finally:
        fp32.stop()
    for s in (fp32, int8):
        assert "Traceback" not in s.log(), s.log()[-4000:]


def test_the_demo_gallery_serves_at_fp16(tmp_path: Path) -> None:
    """fp16 pins its image vectors (its image projection is fp16): the demo gallery a fp16 server installs is
    one it can search, and one made at fp32 is rebuilt for it, not left unsearchable."""
    gdir = tmp_path / "galleries"
    for round_ in range(2):  # a fresh directory, then the one the first fp16 server left
        server = start_server(tmp_path, env={"LNSERVE_GALLERIES_DIR": str(gdir), "LNSERVE_PRECISION": "fp16"})
        try:
            with httpx.Client(base_url=server.url, timeout=60.0) as c:
                r = _retrieve(c, "demo-images", TEXT_QUERY, k=5)
                assert r.status_code == 200 and len(r.json()["results"]) == 5, (round_, r.text)
                assert c.get("/galleries/demo-images").json()["model_identity"].endswith(":fp16")
        finally:
            server.stop()


# -- lnserve gallery build --precision int8 ----------------------------------------------------------
MODEL = "oe_order_lngru"
ST_MODEL = "skipthoughts_lngru"


def test_gallery_built_at_int8_by_the_cli(artifacts: dict[str, Path], tmp_path: Path) -> None:
    gdir = tmp_path / "galleries"
    captions = tmp_path / "captions.txt"
    captions.write_text("\n".join(inputs()["order_embedding"]["captions"][:20]) + "\n", encoding="utf-8")
    images = np.load(LEGACY / "order_embedding" / "images.npy")
    common = ["--model", str(artifacts[MODEL]), "--captions", str(captions), "--pretokenized",
              "--galleries-dir", str(gdir)]  # fmt: skip
    built = run_cli("gallery", "build", "caps8", *common, "--precision", "int8", check=True)
    assert "20 captions added" in built.stdout, built.stdout
    # appending at another precision is refused: one line, exit 2, nothing added
    refused = run_cli("gallery", "build", "caps8", *common, "--append")
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("lnserve: error [gallery_mismatch]: ") and "at int8" in line, line
    run_cli("gallery", "build", "caps8", *common, "--append", "--precision", "int8", check=True)
    listed = run_cli("gallery", "ls", "--galleries-dir", str(gdir), check=True).stdout
    assert "caps8" in listed and "40" in listed, listed

    # skip-thoughts: caption galleries at fp32 and int8, whose items query captions (cosine)
    st = ST_MODEL
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(inputs()["skipthoughts"]["sentences"]) + "\n", encoding="utf-8")
    st_common = ["--model", str(artifacts[st]), "--captions", str(sentences), "--pretokenized",
                 "--galleries-dir", str(gdir)]  # fmt: skip
    run_cli("gallery", "build", "st8", *st_common, "--precision", "int8", check=True)
    run_cli("gallery", "build", "st32", *st_common, check=True)

    query = {"gallery": "caps8", "query": {"image": images[0].tolist()}, "k": 40}
    models = ["--models", str(artifacts[MODEL]), "--models", str(artifacts[st])]
    int8 = start_server(tmp_path, *models, "--precision", "int8", env={"LNSERVE_GALLERIES_DIR": str(gdir)})
    try:
        with httpx.Client(base_url=int8.url, timeout=60.0) as c:
            assert c.get("/galleries/caps8").json()["model_identity"].endswith(":int8")
            r = c.post("/retrieve", json=query)
            assert r.status_code == 200 and len(r.json()["results"]) == 40, r.text
            want = np.argsort(golden(MODEL)["errs"][:20, 0], kind="stable")[:3]  # the exact top 3
            top = int(r.json()["results"][0]["id"]) % 20  # ids 0-19, then the same captions appended as 20-39
            assert top in want, (r.json()["results"][:3], want)
            assert _retrieve(c, "st8", {"text": "a man is walking"}).status_code == 200
            assert _retrieve(c, "st8", {"id": "1"}).status_code == 200
            _mismatch(_retrieve(c, "st32", {"text": "a man is walking"}), "fp32", "int8")
            for gallery, source in (("st32", "st8"), ("st8", "st32")):  # items of two precisions
                message = error_of(
                    _retrieve(c, gallery, {"id": "1", "gallery": source}), 422, "gallery_mismatch"
                )
                assert "at int8" in message and "at fp32" in message, message
    finally:
        int8.stop()
    fp32 = start_server(tmp_path, *models, env={"LNSERVE_GALLERIES_DIR": str(gdir)})
    try:
        with httpx.Client(base_url=fp32.url, timeout=60.0) as c:
            _mismatch(c.post("/retrieve", json=query), "int8", "fp32")
            _mismatch(_retrieve(c, "st8", {"text": "a man is walking"}), "int8", "fp32")
            assert _retrieve(c, "st32", {"text": "a man is walking"}).status_code == 200
    finally:
        fp32.stop()
    for s in (int8, fp32):
        assert "Traceback" not in s.log(), s.log()[-4000:]


# -- a crafted model identity on disk ------------------------------------------------------------------
def _pin(gallery: Path, identity: Any) -> None:
    """Write ``identity`` as the gallery description's ``model_identity``, as a hostile file would."""
    db = sqlite3.connect(gallery / "gallery.sqlite")
    try:
        meta = json.loads(db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()[0])
        meta["model_identity"] = identity
        db.execute("UPDATE meta SET value = ? WHERE key = 'info'", (json.dumps(meta),))
        db.commit()
    finally:
        db.close()


CRAFTED = {
    "int4": ":int4",  # not a profile
    "fp32": ":fp32",  # fp32 is written without a suffix: one spelling per identity
    "injected": ":int8;rm",
    "upper": ":INT8",
    "twice": ":int8:int8",
    "empty": ":",
    "newline": ":int8\n",
    "short-tag": ":int8@0123abcd",  # a calibration tag is 16 hex digits
    "upper-tag": ":int8@0123456789ABCDEF",
    "empty-tag": ":int8@",
    "tag-on-bf16": ":bf16@0123456789abcdef",  # only int8 is calibrated
    "tag-twice": ":int8@0123456789abcdef@0123456789abcdef",
}


def test_crafted_identities_are_damage(artifacts: dict[str, Path], tmp_path: Path) -> None:
    gdir = tmp_path / "galleries"
    captions = tmp_path / "captions.txt"
    captions.write_text("\n".join(inputs()["order_embedding"]["captions"][:4]) + "\n", encoding="utf-8")
    names = ["fine8", "hex65", "hex63", "number", *CRAFTED]
    for name in names:
        run_cli("gallery", "build", name, "--model", str(artifacts[MODEL]), "--captions", str(captions),
                "--pretokenized", "--precision", "int8", "--galleries-dir", str(gdir),
                check=True)  # fmt: skip
    base = _identity_of(gdir / "fine8")
    assert base.endswith(":int8") and HEX64.fullmatch(base[:-5]), base
    hexes = base[:-5]
    for name, suffix in CRAFTED.items():
        _pin(gdir / name, hexes + suffix)
    _pin(gdir / "hex65", hexes + "0:int8")
    _pin(gdir / "hex63", hexes[:-1] + ":int8")
    _pin(gdir / "number", 7)
    damaged = [n for n in names if n != "fine8"]

    for name in names:  # the CLI's check reads the description as the server does
        proc = run_cli("gallery", "check", name, "--galleries-dir", str(gdir))
        if name == "fine8":
            assert proc.returncode == 0, proc.stderr
            continue
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("lnserve: error [gallery_corrupt]: ") and "model_identity" in line, line

    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), "--precision", "int8",
                          env={"LNSERVE_GALLERIES_DIR": str(gdir)})  # fmt: skip
    try:
        with httpx.Client(base_url=server.url, timeout=60.0) as c:
            listed = {g["name"]: g for g in c.get("/galleries").json()["galleries"]}
            assert listed["fine8"]["state"] == "ok"
            query = {"image": np.load(LEGACY / "order_embedding" / "images.npy")[0].tolist()}
            assert _retrieve(c, "fine8", query).status_code == 200
            for name in damaged:
                assert listed[name]["state"] == "corrupt", (name, listed[name])
                assert "model_identity" in listed[name]["reason"], listed[name]
                message = error_of(_retrieve(c, name, query), 503, "gallery_corrupt")
                assert "model_identity" in message, message
            assert c.get("/health").status_code == 200
    finally:
        server.stop()
    assert "Traceback" not in server.log()


def _identity_of(gallery: Path) -> str:
    db = sqlite3.connect(gallery / "gallery.sqlite")
    try:
        return str(
            json.loads(db.execute("SELECT value FROM meta WHERE key = 'info'").fetchone()[0])[
                "model_identity"
            ]
        )
    finally:
        db.close()
