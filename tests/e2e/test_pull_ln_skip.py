"""``lnserve pull ln-skip`` (issue 26): the LN skip-thoughts release's two files from a local HTTP server on
127.0.0.1. Its dictionary was never published: without ``--dictionary`` pull says so before downloading
anything; with it (and optionally ``--word2vec``) the set converts and encodes as the original did."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LEGACY, golden, run_cli
from tests.e2e.test_pull import Server, pull, server  # noqa: F401  (the local server fixture)

SRC = LEGACY / "skipthoughts_training_lngru"
RELEASE = "lngru_may13_1700000"


def serve_release(state) -> None:  # type: ignore[no-untyped-def]
    state.files[f"{RELEASE}.npz"] = (SRC / "model.npz").read_bytes()
    state.files[f"{RELEASE}.npz.pkl"] = (SRC / "model.npz.pkl").read_bytes()


def test_pull_without_dictionary_says_it_was_never_published(server: Server, tmp_path: Path) -> None:  # noqa: F811
    base, state = server
    serve_release(state)
    proc = pull(base, tmp_path, "ln-skip")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith(
        "lnserve: error [unpublished_file]: ln-skip: its vocab.py dictionary pkl was never"
    )
    assert "--dictionary DICT.pkl" in line and "lnserve dictionary recover" in line and "\n" not in line
    assert state.requests == [] and not (tmp_path / "ln-skip").exists()


@pytest.mark.parametrize("expand", [False, True])
def test_pull_with_dictionary_converts_and_encodes(server: Server, tmp_path: Path, expand: bool) -> None:  # noqa: F811
    base, state = server
    serve_release(state)
    extra = ["--word2vec", str(SRC / "w2v.bin")] if expand else []
    proc = pull(base, tmp_path, "ln-skip", "--dictionary", str(SRC / "dictionary.pkl"), *extra, "--no-export")
    assert proc.returncode == 0, proc.stderr
    art = tmp_path / "ln-skip"
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["parts"]["uni"]["cell"] == "lngru"
    assert set(manifest["pull"]["files"]) == {f"{RELEASE}.npz", f"{RELEASE}.npz.pkl"}
    assert "dictionary.pkl" in manifest["sources"]
    text = tmp_path / "s.txt"
    sentences = json.loads((LEGACY / "inputs_training.json").read_text())["sentences"]
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    run_cli("encode", str(art), "--input", str(text), "--output", str(out), "--pretokenized", check=True)
    want = golden("skipthoughts_training_lngru")[f"feat_{'exp' if expand else 'noexp'}_norm1_eos0"]
    assert np.abs(np.load(out) - want).max() <= 1e-5


def test_dictionary_is_refused_for_a_published_layout_set(server: Server, tmp_path: Path) -> None:  # noqa: F811
    base, _ = server
    proc = pull(base, tmp_path, "lngru-order", "--dictionary", str(SRC / "dictionary.pkl"))
    assert proc.returncode == 2
    assert "--dictionary does not apply to lngru-order" in proc.stderr


def test_list_shows_ln_skip() -> None:
    proc = run_cli("pull", "--list", check=True)
    assert "ln-skip" in proc.stdout and f"{RELEASE}.npz" in proc.stdout
