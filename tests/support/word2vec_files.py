"""word2vec binary files for tests: the C tool's layout (a ``\\n`` after each record) or gensim's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def word2vec_bytes(
    words: Sequence[str], vectors: np.ndarray, *, newline: bool = True, header: bytes | None = None
) -> bytes:
    vectors = np.asarray(vectors, dtype="<f4")
    parts = [header if header is not None else b"%d %d\n" % (len(words), vectors.shape[1])]
    for word, vec in zip(words, vectors, strict=True):
        parts.append(word.encode("utf-8") + b" " + vec.tobytes() + (b"\n" if newline else b""))
    return b"".join(parts)
