"""The restricted unpickler: hostile pickles are refused before anything runs; Python 2 text is recovered."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest

from lnserve.converters.errors import CorruptFileError, UnsafePickleError
from lnserve.converters.legacy_files import convert_table, read_legacy_pickle
from lnserve.converters.order_embedding import read_order_embedding
from lnserve.converters.safe_pickle import RestrictedUnpickler, safe_loads
from tests.support.broken import OE_DIR, copy_oe, hostile_pickle, hostile_table

VIAS = ("os", "subprocess", "eval")


@pytest.mark.parametrize("via", VIAS)
def test_control_plain_pickle_would_run_the_payload(via: str, tmp_path: Path) -> None:
    """Proves the hostile pickles are live: the standard unpickler creates the marker."""
    marker = tmp_path / "ran"
    pickle.loads(hostile_pickle(marker, via=via), encoding="latin1")
    assert marker.exists()


@pytest.mark.parametrize("via", VIAS)
def test_hostile_options_pickle_is_refused(via: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    prefix = copy_oe(tmp_path)
    Path(f"{prefix}.pkl").write_bytes(hostile_pickle(marker, via=via))
    with pytest.raises(UnsafePickleError, match=r"oe_order_gru.pkl: refusing to unpickle global '"):
        read_order_embedding(prefix)
    assert not marker.exists()


def test_hostile_table_is_refused_and_leaves_no_output(tmp_path: Path) -> None:
    marker, src, dst = tmp_path / "ran", tmp_path / "btable.npy", tmp_path / "out.npy"
    src.write_bytes(hostile_table(marker))
    with pytest.raises(UnsafePickleError, match=r"btable\.npy: refusing to unpickle global 'os\.system'"):
        convert_table(src, dst)
    assert not marker.exists()
    assert not dst.exists()


def test_hostile_global_after_valid_rows_is_refused(tmp_path: Path) -> None:
    """A payload hidden after real rows: streaming has started writing, yet nothing runs or remains."""
    marker, src, dst = tmp_path / "ran", tmp_path / "utable.npy", tmp_path / "out.npy"
    legit = (OE_DIR.parent / "skipthoughts_gru" / "utable.npy").read_bytes()
    evil = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR"
    src.write_bytes(legit[:-3] + evil + b"atb.")  # after the rows: os.system(...) APPENDed to the list
    with pytest.raises(UnsafePickleError):
        convert_table(src, dst)
    assert not marker.exists()
    assert not dst.exists()


def test_persistent_ids_are_refused() -> None:
    with pytest.raises(UnsafePickleError, match="persistent id"):
        safe_loads(b"P0\n.", source="x.pkl")


def test_overrides_cannot_widen_the_allow_list() -> None:
    with pytest.raises(ValueError, match="allowed globals"):
        RestrictedUnpickler(io.BytesIO(b"."), overrides={("os", "system"): print})


@pytest.mark.parametrize("data", [b"", b"(dp0\nS'a'\n", b"\x80\x02}q\x00(U\x01aq"])
def test_truncated_pickle_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptFileError, match="not a readable legacy pickle"):
        safe_loads(data, source="x.pkl")


def test_py2_utf8_worddict_keys_are_recovered() -> None:
    """The fixture pkl stores 'café' as Python 2 UTF-8 bytes; it must map to its id, not to mojibake."""
    pkl = read_legacy_pickle(OE_DIR / "oe_order_gru.pkl")
    worddict = pkl["worddict"]
    assert worddict["café"] == 39
    assert worddict["東京"] == 44
    assert "caf\xc3\xa9" not in worddict
    assert all(isinstance(k, str) for k in pkl["options"])  # option names stay str, not bytes
    assert read_order_embedding(OE_DIR / "oe_order_gru").worddict["café"] == 39
