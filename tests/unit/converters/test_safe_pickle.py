"""The restricted unpickler: hostile pickles are refused before anything runs; Python 2 text is recovered."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lnserve.converters.errors import CorruptFileError, UnsafePickleError
from lnserve.converters.legacy_files import convert_table, read_legacy_pickle
from lnserve.converters.order_embedding import read_order_embedding
from lnserve.converters.safe_pickle import RestrictedUnpickler, safe_loads
from tests.support import forged
from tests.support.broken import OE_DIR, copy_oe, hostile_pickle, hostile_table
from tests.support.legacy_format import npy_object_header

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


# -- issue 10: values built by allowed globals are checked too ------------------------------------------
def _table(tmp_path: Path, data: bytes) -> tuple[Path, Path]:
    src, dst = tmp_path / "utable.npy", tmp_path / "out.npy"
    src.write_bytes(data)
    return src, dst


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_numpy_pickles_of_plain_arrays_round_trip(protocol: int) -> None:
    """What NumPy pickles loads exactly as NumPy's own unpickler gives it (which makes big-endian data
    native): Fortran order, structured and aligned dtypes, text, 0-d."""
    values = {
        "big": np.arange(6, dtype=">f4").reshape(2, 3),
        "fortran": np.asfortranarray(np.arange(6, dtype="<i8").reshape(2, 3)),
        "struct": np.array([(1.5, 2), (3.0, -4)], dtype=[("x", "<f4"), ("y", ">i2")]),
        "aligned": np.zeros(2, dtype=np.dtype([("a", "u1"), ("b", "<f8")], align=True)),
        "text": np.array(["ab", "c"]),
        "scalar": np.array(7, dtype=np.int32),
    }
    data = pickle.dumps(values, protocol=protocol)
    if protocol == 2:  # Python 3 pickles bytes through _codecs.encode below protocol 3: refused by name
        with pytest.raises(UnsafePickleError, match=r"_codecs\.encode"):
            safe_loads(data, source="x.pkl")
        return
    loaded, reference = safe_loads(data, source="x.pkl"), pickle.loads(data)
    assert loaded.keys() == values.keys()
    for key, want in reference.items():
        got = loaded[key]
        assert type(got) is np.ndarray and got.dtype.descr == want.dtype.descr, key
        assert got.dtype.isalignedstruct == want.dtype.isalignedstruct, key
        assert got.flags.f_contiguous == want.flags.f_contiguous and np.array_equal(got, want), key
        assert got.tobytes() == want.tobytes(), key  # padding bytes included


def test_forged_flags_on_a_structured_dtype_are_refused() -> None:
    """State equal to what NumPy gives, flags included: a structured dtype claiming flags 0 is forged."""
    dt = forged.dtype(
        "V6", (3, "|", None, ("a", "b"), {"a": (np.dtype("<f4"), 0), "b": (np.dtype("<i2"), 4)}, 6, 1, 0)
    )
    with pytest.raises(UnsafePickleError, match=r"x\.pkl: refusing a forged dtype state .* NumPy gives \|V6"):
        safe_loads(forged.dumps({"v": forged.array(dt, "\0" * 6)}), source="x.pkl")


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (forged.forged_array, UnsafePickleError, "refusing dtype 'O8'"),  # its object field's dtype
        (lambda: forged.array(forged.subarray_dtype(), "AAAAAAAA"), UnsafePickleError, "subarray dtype"),
        (lambda: forged.array(np.dtype("O"), [1], shape=(1,)), UnsafePickleError, "refusing dtype 'O8'"),
        (
            lambda: forged.array(np.dtype("<f4"), "AAAA", shape=(1 << 40, 1 << 40)),
            CorruptFileError,
            r"array data is 4 bytes; shape \(1099511627776, 1099511627776\) of <f4 needs",
        ),
        (
            lambda: forged.Reduce(np._core.multiarray._reconstruct, (np.ndarray, (1 << 45,), "b")),
            UnsafePickleError,
            r"refusing _reconstruct\(numpy.ndarray, \(35184372088832,\), 'b'\)",
        ),
        (lambda: forged.Reduce(np.ndarray, ((1 << 45,),)), CorruptFileError, "TypeError"),  # not callable
        (lambda: forged.array(np.dtype("<f4"), "AAAA", shape=(2,)), CorruptFileError, "needs 8"),
        (lambda: forged.dtype("f4", (3, "<", None, None, None, -1, -1, 0x3F)), UnsafePickleError, "forged"),
        (lambda: forged.dtype("M8", (4, "<", None, None, None, -1, -1, 0, None)), UnsafePickleError, "'M8'"),
    ],
    ids=[
        "object-field",
        "subarray",
        "object-array",
        "huge-shape",
        "huge-reconstruct",
        "ndarray-call",
        "short-data",
        "flags",
        "datetime",
    ],
)
def test_forged_numpy_values_are_refused(value: Any, error: type[Exception], message: str) -> None:
    """In-process only where the unfixed code did not crash (see tests/e2e/test_cli_hostile_inputs.py)."""
    with pytest.raises(error, match=message):
        safe_loads(forged.dumps({"v": value()}), source="x.pkl")


def test_object_arrays_hold_only_finished_plain_arrays(tmp_path: Path) -> None:
    """A word table (object arrays allowed) whose rows are ints, not arrays, is refused, not cast."""
    outer = forged.array(np.dtype("O"), [1, 2, 3], shape=(3,))
    src, dst = _table(tmp_path, npy_object_header(3) + pickle.dumps(outer, protocol=2))
    with pytest.raises(UnsafePickleError, match=r"utable\.npy: refusing an object array whose items"):
        convert_table(src, dst)
    assert not dst.exists()


def test_set_state_of_other_objects_is_refused() -> None:
    """BUILD on an OrderedDict would set attributes; only the arrays and dtypes being built get a state."""
    data = b"ccollections\nOrderedDict\n)R(dS'x'\nI1\nsb."
    with pytest.raises(UnsafePickleError, match="refusing to set the state of a OrderedDict object"):
        safe_loads(data, source="x.pkl")


def test_self_reference_is_refused() -> None:
    ring: list[Any] = []
    ring.append(ring)
    with pytest.raises(CorruptFileError, match="refers to itself"):
        safe_loads(pickle.dumps({"options": ring}, protocol=0), source="x.pkl")


def test_shared_substructures_stay_shared(tmp_path: Path) -> None:
    """22 levels of [x, x] (4 million paths): checked and converted once per list, and still shared.

    The unfixed py2_strings copied every path (seconds here, forever at 40 levels)."""
    node: list[Any] = []
    for _ in range(22):
        node = [node, node]
    (tmp_path / "x.pkl").write_bytes(pickle.dumps(node, protocol=2))
    top = read_legacy_pickle(tmp_path / "x.pkl")
    depth = 0
    while top:
        assert top[0] is top[1]
        top, depth = top[0], depth + 1
    assert depth == 22


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (forged.deep_list_pickle(200_000), "the pickle nests deeper than 64 levels"),
        (forged.deep_tuple_key_pickle(100_000), "a dict key nests deeper than 64 levels"),
        (b"\x80\x04\x8f(K\x01\x90.", "sets are not part of the legacy formats"),
        (b"(S'a'\nd.", "SETITEM on a dict with 1 keys and values"),
    ],
    ids=["deep-list", "deep-tuple-key", "set", "odd-dict"],
)
def test_deep_or_odd_structures_are_corrupt(data: bytes, message: str, tmp_path: Path) -> None:
    """Through read_legacy_pickle: the unfixed code raised RecursionError from py2_strings."""
    (tmp_path / "x.pkl").write_bytes(data)
    with pytest.raises(CorruptFileError, match=message):
        read_legacy_pickle(tmp_path / "x.pkl")


def test_memory_error_inside_unpickling_is_corrupt(tmp_path: Path) -> None:
    """BINBYTES8 declaring 2**62 bytes: reading it raises MemoryError, reported as corrupt_file."""
    (tmp_path / "x.pkl").write_bytes(b"\x80\x04\x8e" + (1 << 62).to_bytes(8, "little") + b"x")
    with pytest.raises(
        CorruptFileError, match=r"x\.pkl: not a readable legacy pickle \(asks for more memory"
    ):
        read_legacy_pickle(tmp_path / "x.pkl")


def test_control_characters_in_refused_names_are_escaped() -> None:
    with pytest.raises(UnsafePickleError) as err:
        safe_loads(b"cos\x1b[2J\nsystem\n.", source="x.pkl")
    assert "\x1b" not in str(err.value) and r"'os\x1b[2J.system'" in str(err.value)
