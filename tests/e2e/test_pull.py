"""``lnserve pull`` end to end: the real CLI in a subprocess against a local HTTP server on 127.0.0.1 that
serves the legacy fixtures under the published file names, with Range support and injected faults.

Every failure must leave no artifact, no staging directory and no final download file that is incomplete; a
``NAME.part`` kept for a later resume is expected.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import socket
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from lnserve.app.pull.archive import MAX_MEMBER_BYTES
from tests.conftest import LEGACY, golden, inputs, run_cli
from tests.support import forged

OE = LEGACY / "order_embedding"
FAST = ("--retries", "3", "--backoff", "0.01")
Proc = subprocess.CompletedProcess[str]


@dataclass
class ServerState:
    """What the server serves and which faults it injects; ``requests`` records (file, Range header)."""

    files: dict[str, bytes] = field(default_factory=dict)
    cut_once: dict[str, int] = field(default_factory=dict)  # close after N body bytes, first request only
    overstate: dict[str, int] = field(default_factory=dict)  # announce N more bytes than are ever sent
    requests: list[tuple[str, str | None]] = field(default_factory=list)


Server = tuple[str, ServerState]  # (base URL, state)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        state = cast(_Server, self.server).state
        name = self.path.removeprefix("/files/")
        rng = self.headers.get("Range")
        state.requests.append((name, rng))
        body = state.files.get(name)
        if body is None:
            self.send_error(404)
            return
        size = len(body) + state.overstate.get(name, 0)
        match = re.fullmatch(r"bytes=(\d+)-", rng or "")
        start = int(match[1]) if match else 0
        if start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if match else 200)
        if match:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        payload = body[start:]
        if name in state.cut_once:
            payload = payload[: state.cut_once.pop(name)]
        try:
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: ServerState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


@pytest.fixture
def server() -> Iterator[Server]:
    """A threaded HTTP server on an ephemeral 127.0.0.1 port; yields (base URL, state)."""
    httpd = _Server(ServerState())
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/files", httpd.state
    finally:
        httpd.shutdown()
        httpd.server_close()


def serve_lngru_order(state: ServerState) -> None:
    for ext in ("npz", "pkl"):
        state.files[f"lngru_order_add0.{ext}"] = (OE / f"oe_order_lngru.{ext}").read_bytes()


def pull(base: str, root: Path, *args: str) -> Proc:
    return run_cli("pull", *args, "--dir", str(root), "--base-url", base, *FAST)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_failed_cleanly(proc: Proc, code: str, root: Path, name: str, file: str) -> None:
    """Exit 2 with one line naming the code; no artifact, no staging leftovers, no incomplete final file."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lnserve: error [{code}]"), proc.stderr
    assert not (root / name).exists()
    assert not [p.name for p in root.iterdir() if p.name.startswith(f".{name}.")]
    assert not (root / ".downloads" / name / file).exists()


def test_list_shows_the_catalog() -> None:
    proc = run_cli("pull", "--list", check=True)
    for name in ("lngru-order", "rms-order", "order", "symmetric", "uni-skip", "bi-skip", "combine-skip"):
        assert re.search(rf"^{re.escape(name)}\s", proc.stdout, re.M), name
    assert "124 MB" in proc.stdout and "utable.npy" in proc.stdout


def test_pull_downloads_converts_and_encodes(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    proc = pull(base, tmp_path, "lngru-order")
    assert proc.returncode == 0, proc.stderr
    art = tmp_path / "lngru-order"
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["cell"] == "lngru" and manifest["name"] == "lngru-order"
    files = manifest["pull"]["files"]
    assert files["lngru_order_add0.npz"]["sha256"] == sha(state.files["lngru_order_add0.npz"])
    assert files["lngru_order_add0.pkl"]["url"] == f"{base}/lngru_order_add0.pkl"
    assert manifest["sources"]["lngru_order_add0.npz"] == files["lngru_order_add0.npz"]["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lngru-order"]  # downloads and scratch removed
    caps = tmp_path / "caps.txt"
    caps.write_text("\n".join(inputs()["order_embedding"]["captions"]) + "\n", encoding="utf-8")
    out = tmp_path / "s.npy"
    run_cli("encode", str(art), "--input", str(caps), "--output", str(out), "--pretokenized", check=True)
    assert np.abs(np.load(out) - golden("oe_order_lngru")["sent_emb"]).max() <= 1e-5


def test_pull_resumes_after_a_cut_connection(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    state.cut_once["lngru_order_add0.npz"] = 4096
    proc = pull(base, tmp_path, "lngru-order")
    assert proc.returncode == 0, proc.stderr
    ranges = [r for n, r in state.requests if n == "lngru_order_add0.npz"]
    assert ranges[0] is None and ranges[1] is not None and int(ranges[1][6:-1]) > 0, ranges
    files = json.loads((tmp_path / "lngru-order" / "manifest.json").read_text())["pull"]["files"]
    assert files["lngru_order_add0.npz"]["sha256"] == sha(state.files["lngru_order_add0.npz"])


def test_pull_resumes_a_part_left_by_an_earlier_run(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    state.cut_once["lngru_order_add0.npz"] = 4096
    proc = run_cli("pull", "lngru-order", "--dir", str(tmp_path), "--base-url", base, "--retries", "1")
    assert_failed_cleanly(proc, "truncated", tmp_path, "lngru-order", "lngru_order_add0.npz")
    part = tmp_path / ".downloads" / "lngru-order" / "lngru_order_add0.npz.part"
    assert part.stat().st_size == 4096
    proc = pull(base, tmp_path, "lngru-order")
    assert proc.returncode == 0, proc.stderr
    assert state.requests[-2] == ("lngru_order_add0.npz", "bytes=4096-")
    assert not part.exists() and (tmp_path / "lngru-order" / "manifest.json").is_file()


def test_pull_404_is_not_found(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    del state.files["lngru_order_add0.pkl"]
    proc = pull(base, tmp_path, "lngru-order")
    assert_failed_cleanly(proc, "not_found", tmp_path, "lngru-order", "lngru_order_add0.pkl")
    assert "lngru_order_add0.pkl" in proc.stderr
    assert len([n for n, _ in state.requests if n == "lngru_order_add0.pkl"]) == 1  # a 404 is not retried


def test_pull_truncated_file_fails_and_keeps_the_part(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    state.overstate["lngru_order_add0.npz"] = 1000
    proc = pull(base, tmp_path, "lngru-order")
    assert_failed_cleanly(proc, "truncated", tmp_path, "lngru-order", "lngru_order_add0.npz")
    part = tmp_path / ".downloads" / "lngru-order" / "lngru_order_add0.npz.part"
    assert part.read_bytes() == state.files["lngru_order_add0.npz"]  # kept for a resume, not renamed
    assert [r is not None for n, r in state.requests if n == "lngru_order_add0.npz"] == [False, True, True]


def test_pull_checksum_mismatch(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    proc = pull(base, tmp_path, "lngru-order", "--sha256", f"lngru_order_add0.npz={'0' * 64}")
    assert_failed_cleanly(proc, "checksum_mismatch", tmp_path, "lngru-order", "lngru_order_add0.npz")
    assert not (tmp_path / ".downloads" / "lngru-order" / "lngru_order_add0.npz.part").exists()
    good = sha(state.files["lngru_order_add0.npz"])
    proc = pull(base, tmp_path, "lngru-order", "--sha256", f"lngru_order_add0.npz={good}")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "lngru-order" / "manifest.json").read_text())
    assert manifest["pull"]["files"]["lngru_order_add0.npz"]["verified"] is True


def test_pull_offline(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = pull(f"http://127.0.0.1:{port}/files", tmp_path, "lngru-order")
    assert_failed_cleanly(proc, "offline", tmp_path, "lngru-order", "lngru_order_add0.npz")
    assert "--from DIR" in proc.stderr


def test_pull_refuses_an_existing_artifact_before_downloading(server: Server, tmp_path: Path) -> None:
    base, state = server
    serve_lngru_order(state)
    (tmp_path / "lngru-order").mkdir()
    (tmp_path / "lngru-order" / "keep.txt").write_text("mine")
    proc = pull(base, tmp_path, "lngru-order")
    assert proc.returncode == 2 and "[artifact_error]" in proc.stderr and "--force" in proc.stderr
    assert state.requests == [] and (tmp_path / "lngru-order" / "keep.txt").read_text() == "mine"


def test_pull_extracts_only_named_archive_members(server: Server, tmp_path: Path) -> None:
    base, state = server
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, fixture in (("order", "oe_order_gru"), ("symmetric", "oe_symmetric_gru")):
            for ext in ("npz", "pkl"):
                zf.writestr(f"snapshots/{name}.{ext}", (OE / f"{fixture}.{ext}").read_bytes())
        zf.writestr("../../evil.txt", "path traversal")
    state.files["models.zip"] = buf.getvalue()
    root = tmp_path / "models"
    proc = pull(base, root, "symmetric")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((root / "symmetric" / "manifest.json").read_text())
    assert manifest["options"]["method"] == "cosine" and manifest["cell"] == "gru"
    assert manifest["pull"]["files"]["symmetric.npz"]["member"] == "snapshots/symmetric.npz"
    assert manifest["pull"]["files"]["models.zip"]["sha256"] == sha(state.files["models.zip"])
    assert not list(tmp_path.rglob("evil.txt"))


def test_pull_combine_skip_keeps_downloads(server: Server, tmp_path: Path) -> None:
    base, state = server
    src = LEGACY / "skipthoughts_gru"
    for name in ("uni_skip.npz", "uni_skip.npz.pkl", "bi_skip.npz", "bi_skip.npz.pkl", "utable.npy",
                 "btable.npy", "dictionary.txt"):  # fmt: skip
        state.files[name] = (src / name).read_bytes()
    proc = pull(base, tmp_path, "combine-skip", "--keep-downloads")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "combine-skip" / "manifest.json").read_text())
    assert sorted(manifest["parts"]) == ["bi", "uni"] and len(manifest["pull"]["files"]) == 7
    kept = sorted(p.name for p in (tmp_path / ".downloads" / "combine-skip").iterdir())
    assert kept == sorted(state.files)  # complete files only, no .part


def test_pull_from_a_local_directory(tmp_path: Path) -> None:
    src = tmp_path / "offline"
    src.mkdir()
    for ext in ("npz", "pkl"):
        shutil.copy(OE / f"oe_order_rms_as_lngru.{ext}", src / f"order.{ext}")
    root = tmp_path / "models"
    proc = run_cli(
        "pull", "rms-order", "--dir", str(root), "--from", str(src), "--base-url", "http://0.0.0.0:9"
    )
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((root / "rms-order" / "manifest.json").read_text())
    assert manifest["cell"] == "rlngru" and manifest["options"]["encoder_in_options"] == "lngru"
    assert manifest["pull"]["from_dir"] == str(src.resolve())
    assert sorted(p.name for p in root.iterdir()) == ["rms-order"]
    assert manifest["onnx"]["graphs"]["sentence"]["file"] == "onnx/sentence.onnx"  # exported by default
    assert (root / "rms-order" / "onnx" / "sentence.onnx").is_file()


def test_pull_no_export_leaves_the_graphs_out(tmp_path: Path) -> None:
    src = tmp_path / "offline"
    src.mkdir()
    for ext in ("npz", "pkl"):
        shutil.copy(OE / f"oe_order_rms_as_lngru.{ext}", src / f"order.{ext}")
    root = tmp_path / "models"
    proc = run_cli("pull", "rms-order", "--dir", str(root), "--from", str(src), "--no-export")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((root / "rms-order" / "manifest.json").read_text())
    assert "onnx" not in manifest and not (root / "rms-order" / "onnx").exists()


def test_pull_refuses_an_archive_member_that_would_fill_the_disk(server: Server, tmp_path: Path) -> None:
    """A snapshot member that honestly inflates past the limit (1 GiB of zeros in ~1 MB) is refused from its
    header before a byte is written; before the limit, pull wrote it all out and only the converter balked."""
    base, state = server
    zipped = tmp_path / "models.zip"
    forged.write_zip(
        zipped,
        [
            forged.deflate_bomb("snapshots/symmetric.npz", b"", MAX_MEMBER_BYTES + 1),
            forged.stored("snapshots/symmetric.pkl", (OE / "oe_symmetric_gru.pkl").read_bytes()),
        ],
    )
    state.files["models.zip"] = zipped.read_bytes()
    root = tmp_path / "models"
    proc = pull(base, root, "symmetric")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "[unsafe_archive]" in proc.stderr and f"{MAX_MEMBER_BYTES} byte limit" in proc.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size > 64 << 20 and p != zipped]
