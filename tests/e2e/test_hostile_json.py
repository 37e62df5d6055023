"""Every JSON the project reads from a place someone else may have written, fed hostile JSON, through the
real CLI and a real server (issue 30, finding 10): an artifact's ``manifest.json`` (``lnserve info``,
``lnserve serve``, a reload) and ``vocab.json``; a gallery's stored description and payloads; a payloads
file (``lnserve gallery build --payloads``); a JSON settings value. The hostile forms: 200,000 nested
``[`` (``json.loads`` raised RecursionError: a reload answered 500 and the CLI "internal error", exit 1), a
valid object nesting 40 levels, a FIFO (which blocks a reader), a file over its size bound. The CLI
refuses with one line ``lnserve: error [code]: ...`` and exit 2; a reload answers 422 ``reload_failed``
and the old version serves on; a gallery is quarantined (``corrupt``), never a 500. Also: an alias in
``LNSERVE_MODEL_ALIASES`` must be a valid model name (``..`` and control characters were accepted)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lnserve.converters.artifact import MANIFEST
from tests.conftest import run_cli
from tests.e2e.server import ROOT, free_port, start_server
from tests.support.crafted_models import _copy_demo, _rehash

NAME = "hostile"
KEY = "hostile-json-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
DEEP = "[" * 200_000
REFUSALS = {"manifest_mismatch", "artifact_error"}


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth - 1):
        value = [value]
    return value


def _deep(path: Path) -> None:
    path.write_text(DEEP, encoding="utf-8")


def _nested_40(path: Path) -> None:
    """Valid JSON, the file's own content kept, with 40 levels added beside it."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["extra"] = _nest(40)
    path.write_text(json.dumps(doc), encoding="utf-8")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _oversized(path: Path) -> None:
    """The file's own valid JSON after 5 MiB of whitespace (a manifest is bounded at 4 MiB)."""
    path.write_text(" " * (5 << 20) + path.read_text(encoding="utf-8"), encoding="utf-8")


def _edit_files(path: Path, edit: Callable[[dict[str, object]], None]) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc["files"])
    path.write_text(json.dumps(doc), encoding="utf-8")


def _entry_not_an_object(path: Path) -> None:
    _edit_files(path, lambda files: files.update({"weights.safetensors": []}))  # AttributeError on main


def _outside(path: Path, name: str) -> None:
    """An entry naming a file outside the artifact, listed with its true size and hash: on main it was
    statted and hashed, and a wrong size was echoed (whether a file exists, and how large, to a reloader)."""
    outside = path.parent.parent / "outside.bin"
    outside.write_bytes(b"secret" * 100)
    entry = {"bytes": outside.stat().st_size, "sha256": hashlib.sha256(outside.read_bytes()).hexdigest()}
    _edit_files(path, lambda files: files.update({name.replace("OUT", str(outside)): entry}))


MANIFEST_FORMS: dict[str, Callable[[Path], None]] = {
    "200k nested [": _deep,
    "40 levels in a valid object": _nested_40,
    "a FIFO": _fifo,
    "over the size bound": _oversized,
    "a files entry that is not an object": _entry_not_an_object,
    "a file name with ..": lambda path: _outside(path, "../outside.bin"),
    "an absolute file name": lambda path: _outside(path, "OUT"),
}
VOCAB_FORMS: dict[str, Callable[[Path], None]] = {
    "200k nested [": _deep,
    "40 levels in a valid object": _nested_40,
}
FILES = [(MANIFEST, form) for form in MANIFEST_FORMS] + [("vocab.json", form) for form in VOCAB_FORMS]


def _hostile_artifact(out: Path, file: str, form: str) -> Path:
    model = _copy_demo(out, NAME)
    (MANIFEST_FORMS if file == MANIFEST else VOCAB_FORMS)[form](model / file)
    if file != MANIFEST:
        _rehash(model, file)  # the manifest vouches for it: only the JSON reader stands in the way
    return model


def _refused_in_one_line(proc: subprocess.CompletedProcess[str], codes: set[str]) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert any(lines[0].startswith(f"lnserve: error [{c}]: ") for c in codes), lines[0]
    return lines[0]


@pytest.mark.parametrize(("file", "form"), FILES)
def test_lnserve_info_refuses_hostile_json(tmp_path: Path, file: str, form: str) -> None:
    model = _hostile_artifact(tmp_path / "m", file, form)
    _refused_in_one_line(run_cli("info", str(model)), REFUSALS)


def _serve(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``lnserve serve`` that must refuse to start (a timeout fails the test instead of hanging it)."""
    return subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "LNSERVE_THREADS": "1", **env},
    )


@pytest.mark.parametrize("form", [f for f in MANIFEST_FORMS if f != "a FIFO"])
def test_lnserve_serve_refuses_a_hostile_manifest(tmp_path: Path, form: str) -> None:
    model = _hostile_artifact(tmp_path / "m", MANIFEST, form)
    env = {"LNSERVE_GALLERIES_DIR": str(tmp_path / "g")}
    _refused_in_one_line(_serve("--port", str(free_port()), "--models", str(model), env=env), REFUSALS)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LNSERVE_MODEL_ALIASES", '{"ada": ' + "[" * 100_000),
        ("LNSERVE_MODELS", "[" * 100_000),
        ("LNSERVE_CORS_ORIGINS", "[" * 100_000),
        ("LNSERVE_MODEL_ALIASES", "..=demo-lngru"),
        ("LNSERVE_MODEL_ALIASES", '{"a\\nb": "demo-lngru"}'),
        ("LNSERVE_MODEL_ALIASES", "a/b=demo-lngru"),
        ("LNSERVE_MODEL_ALIASES", "a\nb=demo-lngru"),
    ],
)
def test_a_hostile_json_or_alias_setting_is_one_line(tmp_path: Path, variable: str, value: str) -> None:
    env = {variable: value, "LNSERVE_GALLERIES_DIR": str(tmp_path / "g")}
    line = _refused_in_one_line(_serve("--port", str(free_port()), env=env), {"invalid_setting"})
    assert variable in line and len(line) < 4000, line[:300]


def test_gallery_build_refuses_a_hostile_payloads_file(tmp_path: Path) -> None:
    captions = tmp_path / "captions.txt"
    captions.write_text("a red circle on the left\na blue square\n", encoding="utf-8")
    payloads = tmp_path / "payloads.jsonl"
    payloads.write_text('{"ok": 1}\n' + DEEP + "\n", encoding="utf-8")
    model = _copy_demo(tmp_path / "m", NAME)
    proc = run_cli(
        "gallery", "build", "g", "--model", str(model), "--captions", str(captions),
        "--payloads", str(payloads), "--galleries-dir", str(tmp_path / "galleries"),
    )  # fmt: skip
    line = _refused_in_one_line(proc, {"invalid_input"})
    assert "payloads.jsonl:2" in line, line


def test_a_reload_of_hostile_json_answers_422_and_the_old_version_serves_on(tmp_path: Path) -> None:
    model = _copy_demo(tmp_path / "models" / NAME, NAME)
    good = {f: (model / f).read_bytes() for f in (MANIFEST, "vocab.json")}
    server = start_server(tmp_path, "--models", str(model), env={"LNSERVE_API_KEY": KEY})
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
            for file, form in FILES:
                (MANIFEST_FORMS if file == MANIFEST else VOCAB_FORMS)[form](model / file)
                if file != MANIFEST:
                    _rehash(model, file)
                r = c.post(f"/models/{NAME}/reload")
                assert r.status_code == 422, f"{file}, {form}: {r.status_code} {r.text[:300]}"
                assert r.json()["error"]["code"] == "reload_failed", r.text[:300]
                for f, data in good.items():
                    (model / f).unlink()
                    (model / f).write_bytes(data)
                r = c.post("/encode", json={"sentences": ["a red circle on the left"]})
                assert r.status_code == 200, f"after {file}, {form}: {r.text[:300]}"
            assert c.get("/ready").status_code == 200
    finally:
        server.stop()


def test_a_gallery_with_hostile_stored_json_is_quarantined_not_a_500(tmp_path: Path) -> None:
    """The gallery's description (read when the server lists or opens it) and an item's payload (read with
    the results of a search), each replaced in its database by 200,000 nested ``[``."""
    env = {"LNSERVE_API_KEY": KEY}
    server = start_server(tmp_path, env=env)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
            for name in ("described", "payloaded"):
                assert c.post("/galleries", json={"name": name, "kind": "captions"}).status_code == 201
                items = {"items": [{"id": "x", "text": "a red circle on the left", "payload": {"p": 1}}]}
                assert c.post(f"/galleries/{name}/items", json=items).status_code == 200
    finally:
        server.stop()
    galleries = tmp_path / "galleries"
    for name, sql in (
        ("described", "UPDATE meta SET value = ? WHERE key = 'info'"),
        ("payloaded", "UPDATE items SET payload = ? WHERE id = 'x'"),
    ):
        db = galleries / name / "gallery.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute(sql, (DEEP,))
    server = start_server(tmp_path, env=env)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
            listed = c.get("/galleries")
            assert listed.status_code == 200, listed.text[:300]
            states = {g["name"]: g["state"] for g in listed.json()["galleries"]}
            assert states["described"] == "corrupt", states
            for name in ("described", "payloaded"):
                r = c.post("/retrieve", json={"gallery": name, "query": {"text": "a red circle"}})
                assert r.status_code == 503 and r.json()["error"]["code"] == "gallery_corrupt", r.text[:300]
            assert c.get("/info").status_code == 200
    finally:
        server.stop()


def test_a_payload_is_stored_only_if_it_can_be_read_and_answered(tmp_path: Path) -> None:
    """The write side of the payload bound: a payload nesting 300 levels (the parser of request bodies
    takes it) is refused with 422 ``invalid_input`` instead of being stored; 100 levels are stored and
    come back with the results. What is stored is what every reader reads back within its bound."""
    server = start_server(tmp_path, env={"LNSERVE_API_KEY": KEY})
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
            assert c.post("/galleries", json={"name": "g", "kind": "captions"}).status_code == 201
            for depth, status in ((300, 422), (100, 200)):
                payload = "[" * (depth - 1) + "1" + "]" * (depth - 1)
                body = f'{{"items": [{{"id": "d{depth}", "text": "a red circle", "payload": {payload}}}]}}'
                r = c.post("/galleries/g/items", content=body, headers={"content-type": "application/json"})
                assert r.status_code == status, f"depth {depth}: {r.text[:300]}"
            r = c.post("/retrieve", json={"gallery": "g", "query": {"text": "a red circle"}})
            assert r.status_code == 200, r.text[:300]
            assert [hit["id"] for hit in r.json()["results"]] == ["d100"], r.text[:300]
    finally:
        server.stop()
