"""What the CLI reads and writes, through the real CLI (subprocesses): output paths that cannot be files,
output permissions, inputs that are not .npy arrays, progress bars on a terminal, where ``pull`` writes."""

from __future__ import annotations

import json
import os
import pickle
import pty
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest

from lnserve.app.commands.encode import IMAGE_CHUNK
from lnserve.app.runtime.engine import Engine
from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from tests.conftest import LEGACY, run_cli
from tests.support.broken import OE_DIR

ST_DIR = LEGACY / "skipthoughts_gru"

Proc = subprocess.CompletedProcess[str]
CLI = [sys.executable, "-c", "from lnserve.app.cli import main; main()"]
CAPTIONS = "a dog\na cat on a mat\na man riding a horse\na red car\nthe sky\n"


def refused(proc: Proc, code: str = "invalid_input") -> str:
    """The single stderr line of a refused command."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert lines[0].startswith(f"lnserve: error [{code}]: "), lines[0]
    return lines[0]


def run_umask(*args: str, umask: int, cwd: Path | None = None) -> Proc:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, umask=umask, cwd=cwd)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "oe"
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_gru"), out, name="oe")
    return out


@pytest.fixture
def inputs(model: Path, tmp_path: Path) -> dict[str, Path]:
    """Valid inputs for every command: captions (5 for 1 image), image features, sentence / image vectors."""
    dim = json.loads((model / "manifest.json").read_text())["dims"]["dim"]
    rng = np.random.default_rng(0)
    (tmp_path / "caps.txt").write_text(CAPTIONS, encoding="utf-8")
    np.save(tmp_path / "ims.npy", np.load(OE_DIR / "images.npy")[:1])
    np.save(tmp_path / "svec.npy", rng.standard_normal((5, dim)).astype(np.float32))
    np.save(tmp_path / "ivec.npy", rng.standard_normal((1, dim)).astype(np.float32))
    return {
        k: tmp_path / f
        for k, f in [("caps", "caps.txt"), ("ims", "ims.npy"), ("s", "svec.npy"), ("i", "ivec.npy")]
    }


def _writes(cmd: str, model: Path, inp: dict[str, Path], out: Path) -> list[str]:
    """Arguments of a command that writes the file ``out``."""
    m = str(model)
    return {
        "encode": ["encode", m, "--input", str(inp["caps"]), "--output", str(out)],
        "encode-images": ["encode", m, "--images", str(inp["ims"]), "--output", str(out)],
        "score": ["score", m, "--sentences", str(inp["s"]), "--images", str(inp["i"]), "--output", str(out)],
        "eval": ["eval", "--model", m, "--captions", str(inp["caps"]), "--images", str(inp["ims"]),
                 "--folds", "1", "--json", str(out)],
    }[cmd]  # fmt: skip


COMMANDS = ["encode", "encode-images", "score", "eval"]


# -- outputs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", COMMANDS)
def test_an_output_naming_a_directory_is_refused(
    cmd: str, model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    line = refused(run_cli(*_writes(cmd, model, inputs, out)))
    flag = "--json" if cmd == "eval" else "--output"
    assert f"{flag} {out}: is a directory" in line
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("cmd", COMMANDS)
def test_an_output_under_a_file_is_refused(
    cmd: str, model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    line = refused(run_cli(*_writes(cmd, model, inputs, inputs["caps"] / "sub" / "o.npy")))
    assert f"{inputs['caps']} is a file, not a directory" in line
    assert inputs["caps"].read_text(encoding="utf-8") == CAPTIONS


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)], ids=["022", "027"])
def test_outputs_get_the_permissions_the_umask_gives(
    cmd: str, umask: int, mode: int, model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "new" / "result.out"
    proc = run_umask(*_writes(cmd, model, inputs, out), umask=umask)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert sorted(p.name for p in out.parent.iterdir()) == ["result.out"]  # no temporary file left


def _writes_dir(cmd: str, inp: dict[str, Path], out: Path) -> list[str]:
    """Arguments of a command that writes into the directory ``out``."""
    return {
        "train world": ["train", "world", "--out", str(out)],
        "train order-embedding": ["train", "order-embedding", "--world", "demo", "--out", str(out)],
        "pull": ["pull", "rms-order", "--from", str(inp["caps"].parent), "--dir", str(out)],
        "convert order-embedding": [
            "convert",
            "order-embedding",
            str(OE_DIR / "oe_order_gru"),
            "--out",
            str(out),
        ],
        "convert skip-thoughts": [
            "convert",
            "skip-thoughts",
            "--uni",
            str(ST_DIR / "uni_skip.npz"),
            "--tables",
            str(ST_DIR),
            "--out",
            str(out),
        ],
    }[cmd]


@pytest.mark.parametrize(
    "cmd",
    ["train world", "train order-embedding", "pull", "convert order-embedding", "convert skip-thoughts"],
)
def test_an_output_directory_naming_a_file_is_refused(cmd: str, inputs: dict[str, Path]) -> None:
    caps = inputs["caps"]
    flag = "--dir" if cmd == "pull" else "--out"
    assert f"{flag} {caps}: is a file; give a directory" in refused(run_cli(*_writes_dir(cmd, inputs, caps)))
    line = refused(run_cli(*_writes_dir(cmd, inputs, caps / "sub")))
    assert f"{flag} {caps / 'sub'}: {caps} is a file, not a directory" in line
    assert caps.read_text(encoding="utf-8") == CAPTIONS


def test_an_output_is_replaced_whole(model: Path, inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "o.npy"
    out.write_bytes(b"old")
    run_cli(*_writes("encode", model, inputs, out), check=True)
    assert np.load(out).shape == (5, 16)


# -- inputs that are not .npy arrays --------------------------------------------------------------------
def _npy_readers(model: Path, inp: dict[str, Path], bad: Path, tmp: Path) -> dict[str, list[str]]:
    """Every CLI input that is read as a .npy array, fed ``bad``."""
    m, caps, out, s, i = str(model), str(inp["caps"]), str(tmp / "o.npy"), str(inp["s"]), str(inp["i"])
    return {
        "encode --images": ["encode", m, "--images", str(bad), "--output", out],
        "score --sentences": ["score", m, "--sentences", str(bad), "--images", i, "--output", out],
        "score --images": ["score", m, "--sentences", s, "--images", str(bad), "--output", out],
        "eval --images": ["eval", "--model", m, "--captions", caps, "--images", str(bad)],
        "gallery build --images": ["gallery", "build", "g", "--model", m, "--images", str(bad),
                                   "--galleries-dir", str(tmp / "galleries")],
        "train --images": ["train", "order-embedding", "--out", str(tmp / "t"), "--captions", caps,
                           "--images", str(bad)],
    }  # fmt: skip


READERS = [
    "encode --images",
    "score --sentences",
    "score --images",
    "eval --images",
    "gallery build --images",
    "train --images",
]


@pytest.mark.parametrize("reader", READERS)
def test_a_text_file_where_a_npy_is_expected(
    reader: str, model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    args = _npy_readers(model, inputs, inputs["caps"], tmp_path)[reader]
    line = refused(run_cli(*args))
    assert f"{inputs['caps']}: " in line and "must be a .npy file" in line
    assert "this looks like a text file" in line
    assert "allow_pickle" not in line and "unsafe" not in line
    assert not (tmp_path / "o.npy").exists() and not (tmp_path / "galleries").exists()


def _object_npy(path: Path) -> None:
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


def _npz(path: Path) -> None:
    with path.open("wb") as f:
        np.savez(f, a=np.zeros((2, 20), np.float32))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b""), "the file is empty"),
        (
            lambda p: p.write_bytes(pickle.dumps(np.zeros((2, 20)))),
            "looks like a Python pickle, which is never",
        ),
        (_npz, "zip archive (.npz?)"),
        (_object_npy, "holds Python objects (dtype object), which lnserve never unpickles"),
        (lambda p: p.write_bytes(bytes(range(256)) * 4), "does not start with the .npy signature"),
    ],
)
@pytest.mark.parametrize("reader", ["encode --images", "gallery build --images"])
def test_other_files_that_are_not_npy_arrays(
    make: Callable[[Path], object],
    message: str,
    reader: str,
    model: Path,
    inputs: dict[str, Path],
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.npy"
    make(bad)
    line = refused(run_cli(*_npy_readers(model, inputs, bad, tmp_path)[reader]))
    assert f"{bad}: " in line and message in line
    assert "allow_pickle" not in line and "unsafe" not in line


# -- progress -----------------------------------------------------------------------------------------
def run_on_a_terminal(
    *args: str, timeout: float = 300, stdout: BinaryIO | int = subprocess.DEVNULL
) -> tuple[int, bytes]:
    """Run the CLI with stderr on a pseudo-terminal; (exit code, what the terminal received)."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=stdout, stderr=slave, env=env)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal (it exited)
                break
            if not data:
                break
            received += data
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(received)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()


def test_encode_shows_progress_on_a_terminal(model: Path, inputs: dict[str, Path], tmp_path: Path) -> None:
    code, tty = run_on_a_terminal(*_writes("encode", model, inputs, tmp_path / "o.npy"))
    assert code == 0, tty
    assert b"encoding sentences" in tty and b"5/5" in tty


def test_gallery_build_shows_progress_on_a_terminal(
    model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    args = ["gallery", "build", "caps", "--model", str(model), "--captions", str(inputs["caps"])]
    code, tty = run_on_a_terminal(*args, "--galleries-dir", str(tmp_path / "g"))
    assert code == 0, tty
    assert b"gallery caps: encoding captions" in tty and b"5/5" in tty


def test_encode_images_shows_progress_and_chunks_change_no_vector(model: Path, tmp_path: Path) -> None:
    n = IMAGE_CHUNK + 904
    feats = np.random.default_rng(1).standard_normal((n, 20)).astype(np.float32)
    np.save(tmp_path / "ims.npy", feats)
    out = tmp_path / "o.npy"
    code, tty = run_on_a_terminal(
        "encode", str(model), "--images", str(tmp_path / "ims.npy"), "--output", str(out)
    )
    assert code == 0, tty
    assert b"encoding images" in tty and f"{n}/{n}".encode() in tty
    np.testing.assert_allclose(np.load(out), Engine.open(model).encode_images(feats), rtol=0, atol=1e-5)


def test_no_progress_when_stderr_is_not_a_terminal(
    model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    proc = run_cli(*_writes("encode", model, inputs, tmp_path / "o.npy"), check=True)
    assert "encoding" not in proc.stderr and "\r" not in proc.stderr  # at most the one-line note on UNK words
    assert all(line.startswith("lnserve: note:") for line in proc.stderr.splitlines())
    args = ["gallery", "build", "caps", "--model", str(model), "--captions", str(inputs["caps"])]
    proc = run_cli(*args, "--galleries-dir", str(tmp_path / "g"), check=True)
    assert proc.stderr == ""


# -- pull ---------------------------------------------------------------------------------------------
def test_pull_defaults_to_artifacts_and_says_where_it_wrote(tmp_path: Path) -> None:
    src = tmp_path / "offline"
    src.mkdir()
    for ext in ("npz", "pkl"):
        shutil.copy(OE_DIR / f"oe_order_rms_as_lngru.{ext}", src / f"order.{ext}")
    work = tmp_path / "checkout"
    work.mkdir()
    proc = run_umask(
        "pull", "rms-order", "--from", str(src), "--no-export", "--base-url", "http://0.0.0.0:9",
        umask=0o022, cwd=work,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    art = work / "artifacts" / "rms-order"
    assert (art / "manifest.json").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["artifacts"]  # not ./models, the package folder
    assert f"-> {art.resolve()}" in proc.stdout


def test_convert_draws_progress_on_the_terminal_never_in_the_piped_output(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    """With stderr a terminal and stdout a pipe (``lnserve ... > log``), the bar goes to the terminal and
    stdout carries only the result line; convert's bar used to draw on stdout."""
    with (tmp_path / "stdout").open("wb") as out:
        code, terminal = run_on_a_terminal(
            *_writes_dir("convert skip-thoughts", inputs, tmp_path / "out"), stdout=out
        )
    assert code == 0, terminal
    stdout = (tmp_path / "stdout").read_text(encoding="utf-8")
    assert len(stdout.splitlines()) == 1 and "\x1b" not in stdout, stdout


# -- a full disk -------------------------------------------------------------------------------------------
def _with_file_size_limit(limit: int) -> Callable[[], None]:
    """A child whose files cannot grow past ``limit`` bytes: writes beyond it fail with EFBIG, the way a full
    disk fails them with ENOSPC (both are reported as ``storage_full``)."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def _cli_on_a_full_disk(limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_with_file_size_limit(limit),
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},  # a short .pyc write would stay behind
    )


def test_a_full_disk_during_a_gallery_add_loses_nothing_acknowledged(
    model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    """The add that runs out of space is one clear line (it was ``internal error: OSError``); the items
    acknowledged before it are intact, and the gallery takes the next add once there is room."""
    root = tmp_path / "g"
    build = ["gallery", "build", "caps", "--model", str(model), "--galleries-dir", str(root), "--append"]
    run_cli(*build, "--captions", str(inputs["caps"]), check=True)
    many = tmp_path / "many.txt"
    many.write_text("".join(f"a dog number {i}\n" for i in range(3000)), encoding="utf-8")

    proc = _cli_on_a_full_disk(64 << 10, *build, "--captions", str(many))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "lnserve: error [storage_full]: gallery 'caps': File too large; the write was abandoned "
        "(nothing of it is kept), free space and retry"
    ]
    check = run_cli("gallery", "check", "caps", "--galleries-dir", str(root), check=True)
    assert "ok (5 items in 5 rows, 5 verified" in check.stdout
    run_cli(*build, "--captions", str(many), check=True)
    assert "ok (3005 items" in run_cli("gallery", "check", "caps", "--galleries-dir", str(root)).stdout


def test_a_full_disk_during_a_conversion_leaves_nothing_behind(tmp_path: Path) -> None:
    proc = _cli_on_a_full_disk(
        1000, "convert", "order-embedding", str(OE_DIR / "oe_order_gru"), "--out", str(tmp_path / "out")
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("lnserve: error [storage_full]: ") and len(proc.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no artifact, no staging directory


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_full_disk_on_every_output_is_storage_full(
    cmd: str, model: Path, inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Every command's output file on a full disk is one storage_full line and exit 1, as gallery build
    reports it (encode --output said invalid_input, exit 2), and leaves no partial output behind."""
    out = tmp_path / "out" / ("o.json" if cmd == "eval" else "o.npy")
    proc = _cli_on_a_full_disk(100, *_writes(cmd, model, inputs, out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == (  # after any notes about the input
        f"lnserve: error [storage_full]: {'--json' if cmd == 'eval' else '--output'} {out}: File too large; "
        "the write was abandoned (nothing of it is kept), free space and retry"
    )
    assert list(out.parent.iterdir()) == []


def test_a_full_disk_on_standard_output_is_storage_full(model: Path, tmp_path: Path) -> None:
    """Results printed into a file (``lnserve ... > out``) on a full disk: one storage_full line, exit 1,
    not Python's "Exception ignored" and exit 120 when the output is flushed at exit. (Run buffered, as
    by default: with PYTHONUNBUFFERED Python itself drops the rest of a short write to stdout silently.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with (tmp_path / "listing").open("wb") as stdout:
        proc = subprocess.run(
            [*CLI, "info", str(model), "--json"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            preexec_fn=_with_file_size_limit(10),
            env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        "lnserve: error [storage_full]: writing the output: File too large; the write was abandoned "
        "(nothing of it is kept), free space and retry"
    ]


def test_a_full_disk_during_export_leaves_the_artifact_as_it_was(model: Path, tmp_path: Path) -> None:
    """``lnserve export`` writes graphs into the artifact: on a full disk one storage_full line naming the
    file, exit 1, no temporary file left in it, the manifest unchanged; with room it exports."""
    art = tmp_path / "oe"
    shutil.copytree(model, art)
    manifest = (art / "manifest.json").read_bytes()
    proc = _cli_on_a_full_disk(2000, "export", str(art))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"lnserve: error [storage_full]: {art / 'onnx'}/")
    assert [p.name for p in art.rglob("*") if p.name.endswith(".tmp")] == []
    assert (art / "manifest.json").read_bytes() == manifest
    run_cli("export", str(art), check=True)
    assert "onnx" in json.loads((art / "manifest.json").read_text())
