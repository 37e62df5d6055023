"""The word2vec binary format (GoogleNews-vectors-negative300.bin), streamed and checked as hostile input.

Layout: an ASCII header ``"<N> <D>\\n"``, then N records of the word's UTF-8 bytes, a space, D little-endian
float32 values and (C tool) a ``\\n`` that gensim's writer omits. The header is checked against the file
size before anything is read, every record is bounded (``MAX_WORD_BYTES``), nothing is ever allocated from
a declared count, and the file is read in fixed-size chunks: 3 M x 300 (3.6 GB) streams in constant memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lnserve.errors import shown

from .errors import CorruptFileError
from .legacy_files import require_file

WORD2VEC_DIM = 300  # training/tools.py train_regressor hard-codes it
MAX_HEADER_BYTES = 64
MAX_WORD_BYTES = 4096  # GoogleNews words are at most a few hundred bytes; longer is a broken record
_READ_CHUNK = 16 << 20
_NEWLINE = 0x0A


@dataclass(frozen=True)
class Word2VecHeader:
    path: Path
    count: int
    dim: int
    data_offset: int
    size: int


@dataclass
class Word2VecBlock:
    """Consecutive records: ``first`` is the index of ``words[0]`` in the file."""

    first: int
    words: list[str]
    vectors: np.ndarray  # (len(words), dim) float32


def read_header(path: Path, *, dim: int = WORD2VEC_DIM) -> Word2VecHeader:
    """The header, checked: two positive integers, ``D == dim``, and a file at least as large as N records of
    the smallest possible size (a header that claims more records than the file can hold is refused here)."""
    require_file(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        line = f.readline(MAX_HEADER_BYTES)
    if not line.endswith(b"\n"):
        raise CorruptFileError(f"{path}: not a word2vec binary file (no '<count> <dim>' header line)")
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise CorruptFileError(
            f"{path}: not a word2vec binary file (header {shown(line[:40].decode('latin1'))!r})"
        )
    count, declared_dim = int(parts[0]), int(parts[1])
    if count < 1:
        raise CorruptFileError(f"{path}: the header declares no words")
    if declared_dim != dim:
        raise CorruptFileError(
            f"{path}: vectors have {declared_dim} values; vocabulary expansion needs {dim} (GoogleNews)"
        )
    smallest = len(line) + count * (1 + 1 + 4 * dim)  # a 1-byte word, its space, its floats
    if size < smallest:
        raise CorruptFileError(
            f"{path}: the header declares {count:,} words of {dim} floats (at least {smallest:,} bytes), "
            f"but the file has {size:,} bytes"
        )
    return Word2VecHeader(path, count, dim, len(line), size)


def iter_blocks(
    header: Word2VecHeader,
    *,
    block_records: int = 8192,
    digest: hashlib._Hash | None = None,
    progress: Callable[[int, int], None] | None = None,
    read_chunk: int = _READ_CHUNK,
) -> Iterator[Word2VecBlock]:
    """Every record in file order, ``block_records`` at a time. A truncated record, a word over
    ``MAX_WORD_BYTES``, a word that is not UTF-8, a non-finite value or bytes after the N-th record are
    refused. ``digest`` (if given) is fed every byte of the file, so one pass also yields its sha256."""
    with header.path.open("rb") as f:
        reader = _RecordReader(header, f, block_records, digest, read_chunk)
        while reader.index < header.count:
            yield reader.next_block()
            if progress is not None:
                progress(reader.index, header.count)
        reader.check_end()


class _RecordReader:
    """Parses records out of a sliding buffer; vectors are gathered into one fixed-size block array."""

    def __init__(
        self,
        header: Word2VecHeader,
        f: BinaryIO,
        block_records: int,
        digest: hashlib._Hash | None,
        read_chunk: int,
    ) -> None:
        self.header, self.f, self.digest, self.read_chunk = header, f, digest, read_chunk
        self.path, self.dim = header.path, header.dim
        self.rec_bytes = 4 * header.dim
        self.block = np.empty((block_records, header.dim), dtype=np.float32)
        self.buf, self.pos, self.eof, self.index = b"", 0, False, 0
        self._feed(f.read(header.data_offset))
        self._words: list[str] = []
        self._offsets: list[int] = []
        self._gathered = 0

    def _feed(self, data: bytes) -> None:
        if self.digest is not None:
            self.digest.update(data)

    def _refill(self) -> bool:
        """More bytes after the unparsed tail; vectors still in the old buffer are copied out first."""
        if self.eof:
            return False
        chunk = self.f.read(self.read_chunk)
        self._feed(chunk)
        if not chunk:
            self.eof = True
            return False
        self._gather()
        self.buf, self.pos = self.buf[self.pos :] + chunk, 0
        return True

    def _gather(self) -> None:
        if not self._offsets:
            return
        raw = np.frombuffer(self.buf, dtype=np.uint8)
        idx = np.asarray(self._offsets, dtype=np.int64)[:, None] + np.arange(self.rec_bytes, dtype=np.int64)
        n = len(self._offsets)
        self.block[self._gathered : self._gathered + n] = raw[idx].view("<f4")
        self._gathered += n
        self._offsets = []

    def next_block(self) -> Word2VecBlock:
        first = self.index
        stop = min(first + len(self.block), self.header.count)
        self._words, self._gathered = [], 0
        while self.index < stop:
            self._words.append(self._next_record())
        self._gather()
        vectors = self.block[: self._gathered]
        finite = np.isfinite(vectors).all(axis=1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise CorruptFileError(
                f"{self.path}: record {first + bad + 1} ({shown(self._words[bad])!r}) holds a value that "
                "is not finite"
            )
        return Word2VecBlock(first, self._words, vectors.copy())

    def _next_record(self) -> str:
        number = self.index + 1
        while True:
            buf, pos = self.buf, self.pos
            while pos < len(buf) and buf[pos] == _NEWLINE:  # the C tool's newline before a word
                pos += 1
            self.pos = pos
            space = buf.find(b" ", pos, pos + MAX_WORD_BYTES + 1)
            if space >= 0 and space + 1 + self.rec_bytes <= len(buf):
                break
            if space < 0 and len(buf) - pos > MAX_WORD_BYTES:
                raise CorruptFileError(
                    f"{self.path}: record {number:,} has no space within {MAX_WORD_BYTES} bytes "
                    "(an oversized or broken record)"
                )
            if not self._refill():
                raise CorruptFileError(
                    f"{self.path}: truncated: record {number:,} of {self.header.count:,} is cut off by the "
                    f"end of the file ({self.header.size:,} bytes)"
                )
        raw_word = buf[pos:space].replace(b"\n", b"")  # gensim drops newlines inside a word
        if not raw_word:
            raise CorruptFileError(f"{self.path}: record {number:,} has an empty word")
        try:
            word = raw_word.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptFileError(f"{self.path}: record {number:,}'s word is not valid UTF-8") from None
        self._offsets.append(space + 1)
        self.pos = space + 1 + self.rec_bytes
        self.index += 1
        return word

    def check_end(self) -> None:
        """After the N-th record only the C tool's final newline may follow."""
        rest = len(self.buf) - self.pos
        tail = self.buf[self.pos :]
        while chunk := self.f.read(self.read_chunk):
            self._feed(chunk)
            rest += len(chunk)
            tail = tail[:2] + chunk[:2]
        if rest > 1 or (rest == 1 and tail[:1] != b"\n"):
            raise CorruptFileError(
                f"{self.path}: {rest:,} bytes follow the {self.header.count:,} words the header declares "
                "(a header that understates the file, or trailing data)"
            )
