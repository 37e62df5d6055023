"""Checkpoint validation: missing / mis-shaped / mistyped parameters, unknown cells, extra keys, tables."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from lnserve.converters.errors import (
    MissingParameterError,
    ShapeMismatchError,
    TableMismatchError,
    UnknownCellTypeError,
)
from lnserve.converters.order_embedding import read_order_embedding
from lnserve.converters.skip_thoughts import convert_skip_thoughts
from tests.support.broken import copy_oe, copy_st, rewrite_npz


def test_missing_key_is_named(tmp_path: Path) -> None:
    prefix = copy_oe(tmp_path)
    rewrite_npz(Path(f"{prefix}.npz"), encoder_Ux=None)
    with pytest.raises(MissingParameterError, match=r"oe_order_gru\.npz: missing parameter\(s\) encoder_Ux$"):
        read_order_embedding(prefix)


def test_wrong_shape_names_key_expected_and_found(tmp_path: Path) -> None:
    prefix = copy_oe(tmp_path)
    rewrite_npz(Path(f"{prefix}.npz"), encoder_U=np.zeros((16, 31), np.float32))
    with pytest.raises(ShapeMismatchError, match=r"encoder_U: expected shape \(16, 32\), found \(16, 31\)"):
        read_order_embedding(prefix)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    prefix = copy_oe(tmp_path)
    rewrite_npz(Path(f"{prefix}.npz"), encoder_bx=np.zeros(15, np.float32), Wemb=np.zeros((50, 12)))
    with pytest.raises(ShapeMismatchError) as err:
        read_order_embedding(prefix)
    assert "Wemb: expected float32, found float64" in str(err.value)
    assert "encoder_bx: expected shape (16,), found (15,)" in str(err.value)


def test_unknown_cell_type_in_options(tmp_path: Path) -> None:
    prefix = copy_oe(tmp_path)
    pkl = Path(f"{prefix}.pkl")
    assert pkl.read_bytes().count(b"S'gru'") == 1
    pkl.write_bytes(pkl.read_bytes().replace(b"S'gru'", b"S'xgru'"))
    with pytest.raises(UnknownCellTypeError, match="options say encoder='xgru'"):
        read_order_embedding(prefix)


def test_extra_keys_are_warned_and_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    prefix = copy_oe(tmp_path)
    rewrite_npz(Path(f"{prefix}.npz"), decoder_W=np.zeros(3, np.float32), ff_logit_b=np.zeros(2, np.float32))
    with caplog.at_level(logging.WARNING, logger="lnserve.converters"):
        model = read_order_embedding(prefix)
    assert "ignored extra parameter(s) in oe_order_gru.npz: decoder_W, ff_logit_b" in caplog.text
    assert not any("decoder" in k for k in model.tensors)


def test_skip_thoughts_missing_backward_key(tmp_path: Path) -> None:
    src = copy_st(tmp_path)
    rewrite_npz(src / "bi_skip.npz", encoder_r_Wx=None)
    with pytest.raises(MissingParameterError, match="encoder_r_Wx"):
        convert_skip_thoughts(uni=None, bi=src / "bi_skip.npz", tables=src, out=tmp_path / "a", name="a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]


@pytest.mark.parametrize("drop", [1, -1])
def test_table_dictionary_row_mismatch(drop: int, tmp_path: Path) -> None:
    src = copy_st(tmp_path)
    lines = (src / "dictionary.txt").read_bytes().split(b"\n")[:-1]
    lines = lines[:-1] if drop == 1 else [*lines, b"extra"]
    (src / "dictionary.txt").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(
        TableMismatchError, match=rf"utable\.npy: 47 rows but dictionary\.txt has {47 - drop} lines"
    ):
        convert_skip_thoughts(uni=src / "uni_skip.npz", bi=None, tables=src, out=tmp_path / "a", name="a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]  # no artifact, no staging directory
