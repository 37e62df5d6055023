"""``lnserve.input_files``: only regular files are read, never past the size bound, never a line past the
line bound; each refusal is the caller's error class naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnserve.app.runtime.errors import EncodeInputError
from lnserve.input_files import read_bounded
from tests.support import hostile_files


@pytest.mark.parametrize("kind", hostile_files.KINDS)
def test_every_hostile_kind_is_refused_naming_the_file(kind: str, tmp_path: Path) -> None:
    bad = tmp_path / "in.txt"
    hostile_files.make(kind, bad, max_bytes=4096, max_line_bytes=256)
    exc = hostile_files.raised_within(
        10, lambda: read_bounded(bad, max_bytes=4096, max_line_bytes=256, error=EncodeInputError), bad
    )
    assert isinstance(exc, EncodeInputError) and str(exc).startswith(f"{bad}: "), exc
    expected = {
        "dev-zero": "is a character device, not a regular file",
        "fifo": "is a FIFO (named pipe), not a regular file",
        "directory": "is a directory, not a regular file",
        "long-line": "line 2 is longer than the 256 bytes limit per line",
        "oversized": "4,097 bytes, over the 4 KiB limit for this file",
    }[kind]
    assert expected in str(exc)


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_bytes(b"one\ntwo\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    assert read_bounded(tmp_path / "link.txt", max_bytes=8, max_line_bytes=3) == b"one\ntwo\n"


def test_a_missing_file_and_a_dangling_symlink(tmp_path: Path) -> None:
    (tmp_path / "link.txt").symlink_to(tmp_path / "nowhere")
    for path in (tmp_path / "absent.txt", tmp_path / "link.txt"):
        with pytest.raises(EncodeInputError, match=f"^{path}: no such file$"):
            read_bounded(path, max_bytes=8, max_line_bytes=8, error=EncodeInputError)


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\r\n", b"\xff"]), max_size=60).map(b"".join),
    max_bytes=st.integers(0, 80),
    max_line=st.integers(1, 12),
)
def test_the_bounds_hold_exactly(
    data: bytes, max_bytes: int, max_line: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Read whole iff within both bounds; else refused, naming the first line over the bound."""
    path = tmp_path_factory.mktemp("prop") / "f"
    path.write_bytes(data)
    lines = data.split(b"\n")
    try:
        got = read_bounded(path, max_bytes=max_bytes, max_line_bytes=max_line, error=EncodeInputError)
    except EncodeInputError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ")
        if len(data) > max_bytes:
            assert "limit for this file" in message
        else:
            first = next(n for n, line in enumerate(lines, 1) if len(line) > max_line)
            assert f"line {first} is longer" in message
    else:
        assert got == data and len(data) <= max_bytes and all(len(line) <= max_line for line in lines)
