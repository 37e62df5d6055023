"""Engine: the one inference interface of the CLI and the HTTP app.

Text -> tokens -> ids / table rows -> length-bucketed batches -> backend recurrences -> l2norm / abs ->
vectors in the caller's order. Backends only run ``x (T, B, F), lengths -> last state``, so the torch and
ONNX backends are interchangeable and padding never changes a vector.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from lnserve.extras import require

from ...converters.artifact import Artifact, read_artifact
from ...converters.families import Family, family_of
from .bucketing import length_batches, pad_ids, reverse_padded
from .errors import EncodeInputError, ProviderUnavailableError
from .model_ref import ModelRef
from .precisions import EXACT, backend_for
from .scoring import error_matrix
from .text import (
    MODEL,
    OrderVocabulary,
    TableVocabulary,
    tokenizer_for,
    unk_counts,
)

log = logging.getLogger("lnserve.runtime")

BACKENDS = ("onnx", "torch")
DEFAULT_BACKEND = "onnx"


class Backend(Protocol):
    name: str
    providers: list[str]

    def recurrent(self, part: str, x: np.ndarray, lengths: np.ndarray) -> np.ndarray: ...

    def image_projection(self, features: np.ndarray) -> np.ndarray: ...


def l2normalize(x: np.ndarray) -> np.ndarray:
    """Row-wise, no epsilon (as the original). A row whose squared norm is 0 or overflows float32 has no
    direction: it becomes NaN (the original gave NaN or, silently, zeros) so that ``bad_rows`` finds it."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        sq = (x * x).sum(axis=-1, keepdims=True)
        return np.where(np.isfinite(sq) & (sq > 0), x / np.sqrt(sq), np.float32(np.nan)).astype(
            x.dtype, copy=False
        )


def bad_rows(vectors: np.ndarray) -> np.ndarray:
    """Indices of the rows that are not entirely finite (overflow, a zero or infinite norm)."""
    return np.flatnonzero(~np.isfinite(vectors).all(axis=1))


def check_finite(vectors: np.ndarray, what: str) -> np.ndarray:
    """``vectors`` if every row is finite; else an ``EncodeInputError`` naming the first bad row.

    ``what`` names a row for the caller ("sentence", "feature row"). A vector of NaN, infinities or zeros
    standing for an overflow is never returned."""
    bad = bad_rows(vectors)
    if len(bad):
        raise nonfinite_error(what, int(bad[0]), len(bad))
    return vectors


def finite_parts(vectors: np.ndarray, sizes: Sequence[int], what: str) -> list[np.ndarray | EncodeInputError]:
    """``vectors`` cut into consecutive parts of ``sizes`` rows (one per job of a micro-batch), each part as
    it is or, where a row of it is not finite, the ``EncodeInputError`` naming that row within the part:
    one request's overflow never fails the requests batched with it. The rule is ``check_finite``'s."""
    bad = bad_rows(vectors)  # one pass over the whole batch (run per micro-batch)
    out: list[np.ndarray | EncodeInputError] = []
    start = 0
    for size in sizes:
        end = start + size
        here = bad[(bad >= start) & (bad < end)] if len(bad) else bad
        out.append(
            nonfinite_error(what, int(here[0]) - start, len(here)) if len(here) else vectors[start:end]
        )
        start = end
    return out


def nonfinite_error(what: str, row: int, count: int = 1) -> EncodeInputError:
    more = f" ({count} such rows)" if count > 1 else ""
    return EncodeInputError(
        f"{what} {row} cannot be encoded: its vector is not finite in float32 (an overflow, or a norm of "
        f"0 or infinity){more}"
    )


@dataclass
class Encoded:
    vectors: np.ndarray  # (N, dim) float32
    token_counts: list[int]  # steps run per sentence, eos included
    unk_counts: list[int]  # of those, steps on the UNK id / row (words the model does not know)


def needs_torch(artifact: Artifact) -> str | None:
    """Why only the torch backend can run this artifact, or None. The ONNX graph builder implements the
    legacy norms only, so a pRMSNorm model (``cell_options.partial_rms`` < 1, trained by lnserve) has no
    ONNX graph."""
    p = artifact.partial_rms
    return f"partial RMSNorm (p={p}) has no ONNX graph" if p != 1.0 else None


def open_backend(artifact: Artifact, backend: str, **options: Any) -> Backend:
    """The named backend. Callers pass every option; the torch backend takes ``threads`` and
    ``precision`` (providers and strict are onnxruntime's). ``onnx`` on an artifact only torch can run
    falls back to ``torch`` with a warning (the service keeps its one backend setting), unless
    ``strict=True``; so does ``precision="bf16"`` (``runtime.precisions``: bf16 is torch's)."""
    precision = options.get("precision", EXACT)
    wanted = backend_for(precision, backend) if backend in BACKENDS else backend
    if wanted != backend:
        log.info("%s: precision %s runs on the %s backend", artifact.name, precision, wanted)
        backend = wanted
    reason = needs_torch(artifact)
    if backend == "onnx" and reason:
        if options.get("strict"):
            raise ProviderUnavailableError(f"{artifact.path}: strict mode: {reason}; use --backend torch")
        require("torch", "torch", f"{artifact.name}: {reason}; its torch backend")
        log.warning("%s: %s; falling back to the torch backend", artifact.name, reason)
        backend = "torch"
    if backend == "torch":
        require("torch", "torch", f"--precision {precision}" if precision != EXACT else "--backend torch")
        from .torch_backend import TorchBackend

        return TorchBackend(artifact, threads=options.get("threads"), precision=precision)
    if backend == "onnx":
        from .onnx_backend import OnnxBackend

        return OnnxBackend(artifact, **options)
    raise EncodeInputError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")


class Engine:
    """Encodes sentences and images for one model artifact."""

    def __init__(self, artifact: Artifact, backend: Backend) -> None:
        self.artifact, self.backend = artifact, backend
        m = artifact.manifest
        self.family: Family = family_of(m)
        self.tokenizer_name: str = m["tokenizer"]
        self.defaults: dict[str, bool] = m["defaults"]  # read through ``eos_for`` / ``normalize_for``
        self.output_dim: int = m["dims"]["output_dim"]
        self.method: str = self.family.method_of(m)
        if not self.family.stacked:
            tensors = artifact.tensors()
            self.wemb = tensors["sentence.embedding.weight"]
            self.vocab: OrderVocabulary | TableVocabulary = OrderVocabulary(
                artifact.read_json("vocab.json")["worddict"], m["dims"]["n_words"]
            )
            self.use_abs = bool(m["options"]["abs"])
        else:
            self.vocab = TableVocabulary(
                artifact.read_json("dictionary.json")["words"],
                model_rows=m.get("vocabulary", {}).get("model_words"),
            )
            self.tables = {part: artifact.table(info["table"]) for part, info in m["parts"].items()}
            self.use_abs = False

    @classmethod
    def open(cls, path: Path | str, *, backend: str = DEFAULT_BACKEND, **options: Any) -> Engine:
        artifact = read_artifact(Path(path))
        return cls(artifact, open_backend(artifact, backend, **options))

    @property
    def precision(self) -> str:
        """The served precision profile (``runtime.precisions``)."""
        return str(getattr(self.backend, "precision", EXACT))

    def model_ref(self) -> ModelRef:
        """The identity galleries pin for this engine's vectors (the precision included)."""
        return ModelRef.from_artifact(self.artifact, self.precision)

    # -- text ---------------------------------------------------------------------------------------
    def eos_for(self, eos: bool | None) -> bool:
        """Whether to append <eos>: the request's choice, else the model's default (the one place)."""
        return self.defaults["eos"] if eos is None else eos

    def normalize_for(self, normalize: bool | None) -> bool:
        """Whether to normalise: the request's choice, else the model's default (the one place)."""
        return self.defaults["normalize"] if normalize is None else normalize

    def token_ids(self, sentences: Sequence[str], *, pretokenized: bool, eos: bool) -> list[list[int]]:
        tokenize = tokenizer_for(self.tokenizer_name, pretokenized=pretokenized)
        seqs = [self.vocab.ids(tokenize(s), eos=eos) for s in sentences]
        empty = [i for i, s in enumerate(seqs) if not s]
        if empty:
            raise EncodeInputError(
                f"sentence {empty[0]} has no tokens and eos is off: there is no step to encode "
                f"({len(empty)} such sentence(s))"
            )
        return seqs

    def tokenize(
        self, sentences: Sequence[str], *, pretokenized: bool, eos: bool
    ) -> list[list[tuple[str, int, str | None]]]:
        """Per sentence, each token the model steps on (``<eos>`` last when on) with its id and where its
        vector comes from (``text.MODEL``, ``EXPANSION``, ``UNK``), exactly as ``token_ids`` looks them up:
        ``POST /tokenize`` shows users which words the model does not know."""
        tokenize = tokenizer_for(self.tokenizer_name, pretokenized=pretokenized)
        out = []
        for s in sentences:
            tokens = tokenize(s)
            ids = self.vocab.ids(tokens, eos=eos)
            sources = [self.vocab.source(t) for t in tokens] + ([MODEL] if eos else [])
            out.append(list(zip([*tokens, "<eos>"] if eos else tokens, ids, sources, strict=True)))
        return out

    def decode(self, seqs: Sequence[Sequence[int]], *, skip_special: bool) -> list[str]:
        """Token ids back to text (TEI's ``/decode``): the words joined by spaces, as the tokenizers split
        them; ``skip_special`` leaves out ``<eos>``. An id the model does not have raises EncodeInputError."""
        out = []
        for n, seq in enumerate(seqs):
            words = []
            for i in seq:
                word = self.vocab.word(i)
                if word is None:
                    raise EncodeInputError(f"ids[{n}]: {i} is not a token id of this model")
                if not (skip_special and word == "<eos>"):
                    words.append(word)
            out.append(" ".join(words))
        return out

    def unk_counts(self, seqs: Sequence[Sequence[int]]) -> list[int]:
        """Per sequence from ``token_ids``: how many tokens mapped to UNK."""
        return unk_counts(seqs, self.vocab.unk)

    def encode_sentences(
        self,
        sentences: Sequence[str],
        *,
        pretokenized: bool = False,
        eos: bool | None = None,
        normalize: bool | None = None,
        batch_size: int = 128,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Vectors only, for eval and gallery adds, which never read ``encode``'s counts (cheap next to the
        encoding, so there is one path from sentences to vectors)."""
        return self.encode(
            sentences,
            pretokenized=pretokenized,
            eos=eos,
            normalize=normalize,
            batch_size=batch_size,
            progress=progress,
        ).vectors

    def encode(
        self,
        sentences: Sequence[str],
        *,
        pretokenized: bool = False,
        eos: bool | None = None,
        normalize: bool | None = None,
        batch_size: int = 128,
        progress: Callable[[int], None] | None = None,
    ) -> Encoded:
        seqs = self.token_ids(sentences, pretokenized=pretokenized, eos=self.eos_for(eos))
        vectors = self.encode_ids(
            seqs, normalize=self.normalize_for(normalize), batch_size=batch_size, progress=progress
        )
        return Encoded(vectors, [len(s) for s in seqs], self.unk_counts(seqs))

    def encode_ids(
        self,
        seqs: Sequence[Sequence[int]],
        *,
        normalize: bool,
        batch_size: int = 128,
        check: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Encode sequences from ``token_ids``: the HTTP batcher tokenises (and checks limits) before it
        queues, then encodes many requests' sequences in one call. ``check=False`` returns rows that are
        not finite as they are (the batcher checks per request) instead of raising ``EncodeInputError``.
        ``progress(n)`` after each batch of n."""
        if 0 < len(seqs) <= batch_size:  # one batch (every HTTP batch): nothing to sort, scatter or copy
            out = self._encode_batch(*pad_ids(seqs), normalize=normalize).astype(np.float32, copy=False)
            if progress is not None:
                progress(len(seqs))
            return check_finite(out, "sentence") if check else out
        out = np.empty((len(seqs), self.output_dim), dtype=np.float32)
        for idx in length_batches([len(s) for s in seqs], batch_size):
            ids, lengths = pad_ids([seqs[i] for i in idx])
            out[idx] = self._encode_batch(ids, lengths, normalize=normalize)
            if progress is not None:
                progress(len(idx))
        return check_finite(out, "sentence") if check else out

    def _encode_batch(self, ids: np.ndarray, lengths: np.ndarray, *, normalize: bool) -> np.ndarray:
        if not self.family.stacked:
            h = self.backend.recurrent("sentence", self.wemb[ids], lengths)
            if not normalize:
                return h
            h = l2normalize(h)
            return np.abs(h) if self.use_abs else h
        parts = []
        if "uni" in self.tables:
            uni = self.backend.recurrent("uni", np.asarray(self.tables["uni"][ids]), lengths)
            parts.append(l2normalize(uni) if normalize else uni)
        if "bi" in self.tables:
            x = np.asarray(self.tables["bi"][ids])
            fwd = self.backend.recurrent("bi_fwd", x, lengths)
            bwd = self.backend.recurrent("bi_bwd", reverse_padded(x, lengths), lengths)
            bi = np.concatenate([fwd, bwd], axis=1)
            parts.append(l2normalize(bi) if normalize else bi)
        return np.concatenate(parts, axis=1)

    # -- images and scores --------------------------------------------------------------------------
    def encode_images(self, features: np.ndarray, *, check: bool = True) -> np.ndarray:
        """Image vectors; a row whose projection overflows (or has a zero norm) raises ``EncodeInputError``
        naming it, or with ``check=False`` is returned as NaN for the caller to check."""
        if self.family.text_only:
            raise EncodeInputError(f"this model has no image encoder ({self.family.name} encodes text only)")
        dim_image = self.artifact.manifest["dims"]["dim_image"]
        feats = np.asarray(features)
        if feats.ndim != 2 or feats.shape[1] != dim_image:
            raise EncodeInputError(f"image features must have shape (N, {dim_image}), got {feats.shape}")
        if not np.issubdtype(feats.dtype, np.floating) or not np.isfinite(feats).all():
            raise EncodeInputError("image features must be finite floating-point numbers")
        h = l2normalize(self.backend.image_projection(feats.astype(np.float32, copy=False)))
        h = np.abs(h) if self.use_abs else h
        return check_finite(h, "feature row") if check else h

    def score(self, captions: np.ndarray, images: np.ndarray) -> np.ndarray:
        """The caption x image error matrix with the model's own method (lower is better)."""
        if captions.ndim != 2 or images.ndim != 2 or captions.shape[1] != images.shape[1]:
            raise EncodeInputError(
                "sentence and image vectors must be 2-d with equal widths, "
                f"got {captions.shape} and {images.shape}"
            )
        return error_matrix(captions, images, self.method)
