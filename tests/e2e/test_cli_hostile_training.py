"""Hostile inputs of ``convert skip-thoughts-training`` through the real CLI (issue 26): dictionary pkls that
would run code or carry more than the two vocab.py pickles, word2vec files that are truncated, oversized or
whose header lies. Each is refused with one line and exit 2, no code runs, and nothing is written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LEGACY, run_cli
from tests.e2e.test_cli_errors import assert_refused
from tests.support.word2vec_files import word2vec_bytes

SRC = LEGACY / "skipthoughts_training_lngru"
DICT = (SRC / "dictionary.pkl").read_bytes()
W2V = (SRC / "w2v.bin").read_bytes()
_FIRST_END = DICT.index(b".ccollections") + 1  # the STOP that ends the worddict pickle


def _code_running_pickle(marker: Path) -> bytes:
    return b"cos\nsystem\n(S'touch %s'\ntR." % str(marker).encode()


def _dictionaries(marker: Path) -> dict[str, tuple[bytes, str, str]]:
    """name -> (file bytes, error code, part of the message)."""
    evil = _code_running_pickle(marker)
    return {
        "global_in_worddict": (evil + DICT[_FIRST_END:], "unsafe_pickle", "refusing to unpickle global"),
        "global_in_wordcount": (DICT[:_FIRST_END] + evil, "unsafe_pickle", "refusing to unpickle global"),
        "third_pickle": (DICT + DICT[:_FIRST_END], "corrupt_file", "bytes follow the two pickles"),
        "trailing_bytes": (DICT + b"\n", "corrupt_file", "bytes follow the two pickles"),
        "one_pickle": (DICT[:_FIRST_END], "corrupt_file", "holds one pickle"),
        "not_a_pickle": (b"his 2\nis 3\n", "corrupt_file", "not a readable legacy pickle"),
        "gap_in_indices": (
            DICT.replace(b"aI3\naa", b"aI33\naa", 1),
            "corrupt_file",
            "numbers its words 2, 3, ... in order",
        ),
    }


def _word2vec_files() -> dict[str, tuple[bytes, str]]:
    """name -> (file bytes, part of the message); each is refused as corrupt_file."""
    header_end = W2V.index(b"\n") + 1
    count = int(W2V.split()[0])
    rng = np.random.default_rng(0)
    return {
        "truncated_record": (W2V[:-700], "truncated: record 417 of 417"),
        "header_claims_more": (b"%d 300\n" % (count + 1000) + W2V[header_end:], "but the file has"),
        "header_claims_fewer": (b"%d 300\n" % (count - 1) + W2V[header_end:], "bytes follow the 416 words"),
        "header_absurd": (b"99999999999999999999 300\n" + W2V[header_end:], "but the file has"),
        "wrong_dim": (b"%d 100\n" % count + W2V[header_end:], "needs 300"),
        "no_header": (W2V[header_end:], "not a word2vec binary file"),
        "oversized_record": (
            word2vec_bytes(["x" * 5000 + "y"], rng.standard_normal((1, 300))),
            "no space within 4096 bytes",
        ),
        "non_finite_value": (
            word2vec_bytes(["the", "dog"], np.full((2, 300), np.nan)),
            "not finite",
        ),
        "not_utf8": (
            word2vec_bytes(["ok"], np.zeros((1, 300))).replace(b"ok", b"\xff\xfe"),
            "not valid UTF-8",
        ),
    }


def _convert(
    tmp: Path, *, dictionary: Path, word2vec: Path | None, out: Path
) -> subprocess.CompletedProcess[str]:
    extra = ("--word2vec", str(word2vec)) if word2vec else ()
    return run_cli(
        "convert",
        "skip-thoughts-training",
        str(tmp / "model.npz"),
        "--dictionary",
        str(dictionary),
        *extra,
        "--out",
        str(out),
    )


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    for name in ("model.npz", "model.npz.pkl"):
        shutil.copy(SRC / name, tmp_path / name)
    return tmp_path


def _assert_nothing_written(root: Path, before: set[str], out: Path) -> None:
    assert not out.exists()
    assert {p.name for p in root.iterdir()} == before  # no staging directory left behind


@pytest.mark.parametrize("case", sorted(_dictionaries(Path("/x"))))
def test_hostile_dictionary_is_refused(case: str, model_dir: Path) -> None:
    marker = model_dir / "pwned"
    data, code, message = _dictionaries(marker)[case]
    (model_dir / "dictionary.pkl").write_bytes(data)
    before = {p.name for p in model_dir.iterdir()}
    out = model_dir / "out"
    proc = _convert(model_dir, dictionary=model_dir / "dictionary.pkl", word2vec=None, out=out)
    line = assert_refused(proc, code)
    assert message in line
    assert not marker.exists()  # nothing ran
    _assert_nothing_written(model_dir, before, out)


@pytest.mark.parametrize("case", sorted(_word2vec_files()))
def test_hostile_word2vec_is_refused(case: str, model_dir: Path) -> None:
    data, message = _word2vec_files()[case]
    shutil.copy(SRC / "dictionary.pkl", model_dir / "dictionary.pkl")
    (model_dir / "w2v.bin").write_bytes(data)
    before = {p.name for p in model_dir.iterdir()}
    out = model_dir / "out"
    proc = _convert(
        model_dir, dictionary=model_dir / "dictionary.pkl", word2vec=model_dir / "w2v.bin", out=out
    )
    line = assert_refused(proc, "corrupt_file")
    assert message in line, line
    _assert_nothing_written(model_dir, before, out)


def test_dictionary_giving_a_model_row_to_unk_is_refused(model_dir: Path) -> None:
    """A literal ``UNK`` word with a model row would silently replace the UNK vector (spec §5.4 pitfall 3)."""
    (model_dir / "dictionary.pkl").write_bytes(DICT.replace(b"S'his'\n", b"S'UNK'\n", 1))
    out = model_dir / "out"
    proc = _convert(model_dir, dictionary=model_dir / "dictionary.pkl", word2vec=None, out=out)
    assert "would take over the special 'UNK' row" in assert_refused(proc, "corrupt_file")
    assert not out.exists()
