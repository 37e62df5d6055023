"""Cell detection: every row of spec §5.2's table, the LSTM analogues, overrides and refusals."""

from __future__ import annotations

import pytest

from lnserve.converters.detect import detect_cell
from lnserve.converters.errors import MissingParameterError, UnknownCellTypeError
from lnserve.converters.order_embedding import read_order_embedding
from tests.support.broken import OE_DIR

BASE = {"encoder_W", "encoder_U", "encoder_b", "encoder_Wx", "encoder_Ux", "encoder_bx", "Wemb"}
S4 = {f"encoder_s{i}" for i in "1234"}
B4 = {f"encoder_b{i}" for i in "1234"}
S3 = {f"encoder_s{i}" for i in "123"}
B3 = {f"encoder_b{i}" for i in "123"}


@pytest.mark.parametrize(
    ("option", "keys", "cell", "noted"),
    [
        ("gru", BASE, "gru", False),
        ("lngru", BASE | S4 | B4, "lngru", False),
        ("lngru", BASE | S4, "rlngru", True),  # the RMSNorm release: pkl says lngru
        ("rlngru", BASE | S4, "rlngru", False),
        ("lstm", BASE, "lstm", False),
        ("lnlstm", BASE | S3 | B3, "lnlstm", False),
        ("lnlstm", BASE | S3, "rlnlstm", True),
        ("rlnlstm", BASE | S3, "rlnlstm", False),
    ],
)
def test_detection_table(option: str, keys: set[str], cell: str, noted: bool) -> None:
    got, note = detect_cell(option, keys, prefix="encoder")
    assert got == cell
    assert (note is not None) == noted
    if noted:
        assert "RMSNorm" in note and option in note


@pytest.mark.parametrize(
    ("option", "keys"),
    [
        ("gru", BASE | S4),  # gains on a plain GRU
        ("gru", BASE | S4 | B4),
        ("lngru", BASE),  # LN without any norm parameter
        ("lngru", BASE | B4),  # biases without gains
        ("lngru", BASE | S4 | {"encoder_b1"}),  # partial biases
        ("lngru", BASE | {"encoder_s1", "encoder_s2"}),  # partial gains
        ("rlngru", BASE | S4 | B4),  # RMS has no biases
        ("rlngru", BASE),
        ("lstm", BASE | S3),
        ("bogus", BASE),
        ("", BASE),
    ],
)
def test_other_combinations_are_refused(option: str, keys: set[str]) -> None:
    with pytest.raises(UnknownCellTypeError, match=f"options say encoder={option!r}.*pass --cell"):
        detect_cell(option, keys, prefix="encoder")


def test_override_wins_and_is_noted() -> None:
    assert detect_cell("bogus", BASE, prefix="encoder", override="gru") == (
        "gru",
        "cell type 'gru' given explicitly (the options say 'bogus')",
    )
    assert detect_cell("lngru", BASE | S4, prefix="encoder", override="lngru") == ("lngru", None)


def test_unknown_override_is_refused() -> None:
    with pytest.raises(UnknownCellTypeError, match="unknown cell type 'lnrgu'; expected one of gru, lngru"):
        detect_cell("gru", BASE, prefix="encoder", override="lnrgu")


def test_rms_as_lngru_fixture_is_read_as_rms() -> None:
    model = read_order_embedding(OE_DIR / "oe_order_rms_as_lngru")
    assert model.cell == "rlngru"
    assert any("RMSNorm" in n for n in model.notes)


def test_override_keys_are_still_checked() -> None:
    """Forcing LN onto RMS weights does not silently invent the missing LN biases."""
    with pytest.raises(MissingParameterError, match="encoder_b1, encoder_b2, encoder_b3, encoder_b4"):
        read_order_embedding(OE_DIR / "oe_order_rms_as_lngru", cell="lngru")
