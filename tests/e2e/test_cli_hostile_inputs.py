"""Forged pickles, zip bombs, escape sequences and symlinks through the real CLI (issues 10 and 15).

Each conversion runs in a subprocess: the unfixed converter died with SIGSEGV (a negative return code) or an
internal error on several of these. Refusals must exit 2 with one stderr line carrying the stable code,
write nothing, and never echo a control character.
"""

from __future__ import annotations

import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.e2e.test_cli_errors import assert_refused
from tests.support import forged
from tests.support.broken import copy_oe, copy_st, npy_bytes

_RECONSTRUCT = np._core.multiarray._reconstruct  # type: ignore[attr-defined]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _refused(proc: subprocess.CompletedProcess[str], code: str) -> str:
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr}"
    line = assert_refused(proc, code)
    assert "\x1b" not in proc.stderr
    return line


def _protocol_2_oe_pickle(worddict: dict[str, object]) -> bytes:
    with (forged.OE_DIR / "oe_order_gru.pkl").open("rb") as f:
        legit = pickle.load(f, encoding="latin1")  # trusted fixture
    return pickle.dumps(
        {"options": legit["options"], "worddict": {**legit["worddict"], **worddict}}, protocol=2
    )


def _convert_oe(prefix: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("convert", "order-embedding", str(prefix), "--out", str(out), *extra)


@pytest.mark.parametrize(
    ("pkl", "code", "message"),
    [
        (
            lambda: forged.oe_pickle(options={"dim": forged.forged_array()}),
            "unsafe_pickle",
            "refusing dtype 'O8'",
        ),
        (
            lambda: forged.oe_pickle(worddict={"zz": forged.forged_array()}),
            "unsafe_pickle",
            "refusing dtype 'O8'",
        ),
        (
            lambda: forged.oe_pickle(options={"dim": forged.array(forged.subarray_dtype(), "AAAAAAAA")}),
            "unsafe_pickle",
            "refusing a subarray dtype",
        ),
        (
            lambda: forged.oe_pickle(
                options={"dim": forged.Reduce(_RECONSTRUCT, (np.ndarray, (1 << 45,), "b"))}
            ),
            "unsafe_pickle",
            "refusing _reconstruct(numpy.ndarray, (35184372088832,), 'b')",
        ),
        (
            lambda: forged.oe_pickle(
                options={"dim": forged.array(np.dtype("<f4"), "AAAA", shape=(1 << 40, 1 << 40))}
            ),
            "corrupt_file",
            "array data is 4 bytes; shape (1099511627776, 1099511627776) of <f4 needs",
        ),
        (
            lambda: forged.oe_pickle(options={"dim": "sixteen"}),
            "corrupt_file",
            "option dim must be a positive integer",
        ),
        (  # json.dumps of the vocabulary then failed: internal error, exit 1
            lambda: _protocol_2_oe_pickle({"zz": 2**20000}),  # protocol 0 cannot write it
            "corrupt_file",
            "(1 do not; the first: 'zz' -> <an integer of 20001 bits>)",
        ),
        (
            lambda: forged.oe_pickle(worddict={"zz": -1, "yy": True}),
            "corrupt_file",
            "worddict entries must map words to int ids in [0, 2**31) (2 do not",
        ),
        (lambda: forged.deep_list_pickle(200_000), "corrupt_file", "the pickle nests deeper than 64 levels"),
        (
            lambda: forged.deep_tuple_key_pickle(200_000),
            "corrupt_file",
            "a dict key nests deeper than 64 levels",
        ),
    ],
    ids=[
        "options-forged",
        "worddict-forged",
        "subarray",
        "huge-reconstruct",
        "huge-shape",
        "text-dim",
        "worddict-huge-id",
        "worddict-negative-or-bool-id",
        "deep-list",
        "deep-tuple-key",
    ],
)
def test_convert_refuses_a_hostile_options_pickle(
    pkl: Callable[[], bytes], code: str, message: str, tmp_path: Path
) -> None:
    """Unfixed: SIGSEGV (options-forged, deep-tuple-key), internal errors (MemoryError, RecursionError,
    TypeError) or a misleading code (worddict-forged: corrupt_file)."""
    prefix = copy_oe(tmp_path)
    Path(f"{prefix}.pkl").write_bytes(pkl())
    before = _files(tmp_path)
    line = _refused(_convert_oe(prefix, tmp_path / "out"), code)
    assert message in line and "oe_order_gru.pkl: " in line
    assert _files(tmp_path) == before


def test_convert_refuses_a_forged_dtype_inside_a_table(tmp_path: Path) -> None:
    """A word-table row over the forged dtype: the unfixed converter cast it to float32 and died (SIGSEGV)."""
    src = copy_st(tmp_path)
    (src / "utable.npy").write_bytes(forged.table_with_row(forged.forged_array(), 47))
    before = _files(tmp_path)
    args = ["--uni", str(src / "uni_skip.npz"), "--tables", str(src), "--out", str(tmp_path / "m")]
    line = _refused(run_cli("convert", "skip-thoughts", *args), "unsafe_pickle")
    assert "utable.npy: refusing structured dtype" in line and "object fields" in line
    assert _files(tmp_path) == before


def test_convert_refuses_a_zip_bomb_member_quickly(tmp_path: Path) -> None:
    """A needed member whose header declares (12, 32) float32 but whose stream inflates to 256 MiB."""
    prefix = copy_oe(tmp_path)
    npz = Path(f"{prefix}.npz")
    members = [m for m in forged.npz_members(npz) if m.name != "encoder_W.npy"]
    forged.write_zip(
        npz, [*members, forged.deflate_bomb("encoder_W.npy", forged.npy_header((12, 32)), 256 << 20)]
    )
    before = _files(tmp_path)
    line = _refused(_convert_oe(prefix, tmp_path / "out"), "corrupt_file")
    assert "member 'encoder_W.npy' expands" in line and "zip bomb" in line
    assert _files(tmp_path) == before


def test_convert_escapes_member_names_on_the_terminal(tmp_path: Path) -> None:
    """An extra member named with ANSI sequences is listed escaped in the warning, never raw."""
    prefix = copy_oe(tmp_path)
    npz = Path(f"{prefix}.npz")
    evil = forged.stored("\x1b]0;owned\x07\x1b[2Jx.npy", npy_bytes(np.zeros(1, np.float32)))
    forged.write_zip(npz, [*forged.npz_members(npz), evil])
    proc = _convert_oe(prefix, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert r"ignored extra parameter(s) in oe_order_gru.npz: \x1b]0;owned\x07\x1b[2Jx" in proc.stderr


def test_convert_refuses_a_symlinked_output_even_with_force(tmp_path: Path) -> None:
    """--force on a symlink replaced the link's target folder; now nothing is touched."""
    (tmp_path / "src").mkdir()
    prefix = copy_oe(tmp_path / "src")
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    link = tmp_path / "out"
    link.symlink_to(target, target_is_directory=True)
    before = _files(tmp_path)
    line = _refused(_convert_oe(prefix, link, "--force"), "artifact_error")
    assert f"{link}: output path is a symbolic link" in line
    assert (target / "keep.txt").read_text() == "mine" and link.is_symlink()
    assert _files(tmp_path) == before
