"""``lnserve encode`` and ``lnserve score``: run a converted model on files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from lnserve.errors import UserInputError

from ..runtime.engine import DEFAULT_BACKEND, Engine
from ..runtime.errors import EncodeInputError
from .common import (
    BackendOpt,
    PrecisionOpt,
    check_output,
    load_matrix,
    progress_bar,
    read_lines,
    save_npy,
)


def encode(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    output: Annotated[Path, typer.Option("--output", help="Output .npy (float32, N x dim).")],
    input: Annotated[Path | None, typer.Option("--input", help="UTF-8 text, one sentence per line.")] = None,
    images: Annotated[
        Path | None, typer.Option("--images", help="Image features .npy (N x dim_image).")
    ] = None,
    pretokenized: Annotated[
        bool, typer.Option(help="Split on whitespace only (the original behaviour).")
    ] = False,
    eos: Annotated[
        bool | None, typer.Option("--eos/--no-eos", help="Append <eos> (default: the model's).")
    ] = None,
    no_normalize: Annotated[bool, typer.Option("--no-normalize", help="Return raw final states.")] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Sentences per batch.")] = 128,
    backend: BackendOpt = DEFAULT_BACKEND,
    precision: PrecisionOpt = "fp32",
) -> None:
    """Encode sentences (--input) or images (--images) into vectors."""
    if (input is None) == (images is None):
        raise UserInputError("give exactly one of --input and --images")
    # check the output and read the inputs first: bad input fails before a model is loaded
    check_output(output)
    sentences = read_lines(input) if input is not None else None
    features = load_matrix(images, "image features") if images is not None else None
    engine = Engine.open(model_dir, backend=backend, precision=precision)
    if sentences is not None:
        with progress_bar("encoding sentences", len(sentences)) as advance:
            encoded = engine.encode(
                sentences,
                pretokenized=pretokenized,
                eos=eos,
                normalize=not no_normalize,
                batch_size=batch_size,
                progress=advance,
            )
        vectors = encoded.vectors
        _report_unknown_words(encoded.unk_counts)
    else:
        assert features is not None
        vectors = _encode_images(engine, features)
    save_npy(output, vectors)
    typer.echo(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 vectors to {output}")


IMAGE_CHUNK = 4096  # image rows per projection call: progress steps, and a bounded working set


def _encode_images(engine: Engine, features: np.ndarray) -> np.ndarray:
    """Image features in chunks, for the progress bar (a row's vector never depends on the others)."""
    if len(features) <= IMAGE_CHUNK:
        return engine.encode_images(features)
    chunks = []
    with progress_bar("encoding images", len(features)) as advance:
        for start in range(0, len(features), IMAGE_CHUNK):
            chunks.append(engine.encode_images(features[start : start + IMAGE_CHUNK]))
            advance(len(chunks[-1]))
    return np.concatenate(chunks)


def _report_unknown_words(unk_counts: list[int]) -> None:
    """Say on stderr how many sentences have words the model does not know: their vectors are arbitrary."""
    hit = [i for i, n in enumerate(unk_counts) if n]
    if hit:
        typer.echo(
            f"lnserve: note: {len(hit)} of {len(unk_counts)} sentences have words the model does not know "
            f"({sum(unk_counts)} tokens mapped to UNK; first: line {hit[0] + 1})",
            err=True,
        )


def score(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    sentences: Annotated[Path, typer.Option("--sentences", help="Sentence vectors .npy (N x dim).")],
    images: Annotated[Path, typer.Option("--images", help="Image vectors .npy (M x dim).")],
    output: Annotated[Path, typer.Option("--output", help="Output error matrix .npy (N x M).")],
) -> None:
    """Caption x image error matrix with the model's method (order violation or negative cosine)."""
    from ...converters.artifact import read_artifact
    from ...converters.families import family_of
    from ..runtime.scoring import error_matrix

    check_output(output)
    artifact = read_artifact(model_dir)
    if family_of(artifact.family).text_only:
        raise UserInputError("score needs an order-embedding model")
    s, v = load_matrix(sentences, "sentence vectors"), load_matrix(images, "image vectors")
    dim = artifact.manifest["dims"]["dim"]
    if s.shape[1] != dim or v.shape[1] != dim:
        raise EncodeInputError(f"vectors must have {dim} columns, got {s.shape} and {v.shape}")
    errs = error_matrix(s, v, artifact.manifest["options"]["method"])
    save_npy(output, errs)
    typer.echo(f"wrote {errs.shape[0]} x {errs.shape[1]} error matrix to {output}")


def register(app: typer.Typer) -> None:
    app.command()(encode)
    app.command()(score)
