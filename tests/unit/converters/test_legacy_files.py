"""Legacy readers: the streamed table conversion, truncated archives, dictionary.txt line semantics."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from lnserve.converters.errors import CorruptFileError, TableMismatchError
from lnserve.converters.legacy_files import convert_table, read_dictionary, read_npz
from tests.conftest import LEGACY, ST_VARIANTS
from tests.support.broken import OE_DIR, npy_bytes, truncated
from tests.support.legacy_format import write_legacy_table, write_legacy_table_stream


def _fixture_rows(variant: str, table: str) -> list[np.ndarray]:
    info = next(
        v
        for v in json.loads((LEGACY / "inputs.json").read_text())["skipthoughts"]["variants"]
        if v["dir"] == variant
    )
    plain = np.load(LEGACY / variant / f"{table}_plain.npy")
    wide = set(info["rows_with_shape_1xd"])
    return [plain[i][None] if w in wide else plain[i] for i, w in enumerate(info["dictionary"])]


@pytest.mark.parametrize("variant", ST_VARIANTS)
@pytest.mark.parametrize("table", ["utable", "btable"])
def test_writer_reproduces_the_fixture_bytes(variant: str, table: str, tmp_path: Path) -> None:
    """The synthetic-table writer (used by the memory benchmark) is byte-exact against Python 2 output."""
    rows = _fixture_rows(variant, table)
    write_legacy_table(tmp_path / "t.npy", rows, len(rows))
    assert (tmp_path / "t.npy").read_bytes() == (LEGACY / variant / f"{table}.npy").read_bytes()


@pytest.mark.parametrize("variant", ST_VARIANTS)
def test_fixture_tables_convert_to_the_plain_values(variant: str, tmp_path: Path) -> None:
    for table in ("utable", "btable", "utable_plain"):
        n, dim = convert_table(LEGACY / variant / f"{table}.npy", tmp_path / f"{table}.out.npy")
        out = np.load(tmp_path / f"{table}.out.npy", mmap_mode="r")
        assert (n, dim) == out.shape and out.dtype == np.float32
        assert np.array_equal(out, np.load(LEGACY / variant / f"{table.split('_')[0]}_plain.npy"))


def test_large_table_streams_in_chunks(tmp_path: Path) -> None:
    """1,500 rows of 620: BINSTRING data, LONG_BINPUT memo ids, two APPENDS batches, several chunks."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1500, 620), dtype=np.float32)
    rows = [r[None] if i % 5 == 0 else r for i, r in enumerate(data)]
    write_legacy_table(tmp_path / "t.npy", rows, len(rows))
    seen: list[tuple[int, int]] = []
    n, dim = convert_table(
        tmp_path / "t.npy", tmp_path / "o.npy", chunk_rows=256, progress=lambda i, t: seen.append((i, t))
    )
    assert (n, dim) == (1500, 620)
    assert np.array_equal(np.load(tmp_path / "o.npy"), data)
    assert seen[-1] == (1500, 1500) and [i for i, _ in seen] == sorted(i for i, _ in seen)


def test_shared_rows_fall_back_to_a_full_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A pickle whose list repeats a memoised row (BINGET) is still converted correctly."""
    rows = _fixture_rows("skipthoughts_gru", "utable")
    write_legacy_table(tmp_path / "t.npy", rows, len(rows))
    data = bytearray((tmp_path / "t.npy").read_bytes())
    # make row 1 a reference to row 0 (memo 7): replace its whole REDUCE...BUILD with BINGET 7
    start = data.index(b"h\x01h\x02", data.index(b"tb", data.index(b"q\x08")))
    end = data.index(b"tb", start) + 2
    data[start:end] = b"h\x07"
    (tmp_path / "t.npy").write_bytes(bytes(data))
    with caplog.at_level(logging.INFO, logger="lnserve.converters"):
        convert_table(tmp_path / "t.npy", tmp_path / "o.npy")
    out = np.load(tmp_path / "o.npy")
    assert np.array_equal(out[1], out[0]) and np.array_equal(
        out[2:], np.stack([r.reshape(-1) for r in rows[2:]])
    )
    assert "without streaming" in caplog.text


def test_row_of_the_wrong_width_is_refused(tmp_path: Path) -> None:
    rows = [np.zeros(10, np.float32), np.zeros(10, np.float32), np.zeros(9, np.float32)]
    write_legacy_table(tmp_path / "t.npy", rows, 3)
    with pytest.raises(TableMismatchError, match=r"t\.npy: row 2 has 9 values, expected 10"):
        convert_table(tmp_path / "t.npy", tmp_path / "o.npy")
    assert not (tmp_path / "o.npy").exists()


def test_header_row_count_must_match(tmp_path: Path) -> None:
    with (tmp_path / "t.npy").open("wb") as f:
        write_legacy_table_stream(f, [np.zeros(4, np.float32)] * 2, 2)
    data = (tmp_path / "t.npy").read_bytes().replace(b"'shape': (2,), }", b"'shape': (3,), }")
    (tmp_path / "t.npy").write_bytes(data)
    with pytest.raises(CorruptFileError, match="expected one 1-d object array of 3 rows"):
        convert_table(tmp_path / "t.npy", tmp_path / "o.npy")


@pytest.mark.parametrize("keep", [0.05, 0.5, 0.99])
def test_truncated_table_is_corrupt(keep: float, tmp_path: Path) -> None:
    src = tmp_path / "t.npy"
    src.write_bytes(truncated((LEGACY / "skipthoughts_gru" / "utable.npy").read_bytes(), keep))
    with pytest.raises(CorruptFileError, match=r"t\.npy: "):
        convert_table(src, tmp_path / "o.npy")
    assert not (tmp_path / "o.npy").exists()


def test_empty_and_non_2d_tables(tmp_path: Path) -> None:
    write_legacy_table(tmp_path / "e.npy", [], 0)
    with pytest.raises(CorruptFileError, match="the table is empty"):
        convert_table(tmp_path / "e.npy", tmp_path / "o.npy")
    (tmp_path / "v.npy").write_bytes(npy_bytes(np.zeros(5, np.float32)))
    with pytest.raises(CorruptFileError, match=r"expected a 2-d table, found shape \(5,\)"):
        convert_table(tmp_path / "v.npy", tmp_path / "o.npy")


@pytest.mark.parametrize("keep", [0.0, 0.3, 0.9])
def test_truncated_npz_is_corrupt(keep: float, tmp_path: Path) -> None:
    src = tmp_path / "m.npz"
    src.write_bytes(truncated((OE_DIR / "oe_order_gru.npz").read_bytes(), keep))
    with pytest.raises(CorruptFileError, match=r"m\.npz: not a readable \.npz archive"):
        read_npz(src)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CorruptFileError, match=r"nope\.npz: file not found"):
        read_npz(tmp_path / "nope.npz")


def test_dictionary_splits_on_newline_only(tmp_path: Path) -> None:
    path = tmp_path / "dictionary.txt"
    path.write_bytes("UNK\n<eos>\ncafé\na\rb\nc\u2028d\n x \n".encode())
    assert read_dictionary(path) == ["UNK", "<eos>", "café", "a\rb", "c\u2028d", "x"]
    path.write_bytes(b"UNK\n\xff\xfe\n")
    with pytest.raises(CorruptFileError, match="line 2 is not valid UTF-8"):
        read_dictionary(path)
