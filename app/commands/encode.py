"""``lnserve encode`` and ``lnserve score``: run a converted model on files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lnserve.app.commands.common import BackendOpt, load_matrix, read_lines, save_npy
from lnserve.app.runtime.engine import DEFAULT_BACKEND
from lnserve.converters.errors import EncodeInputError, UserInputError


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
    precision: Annotated[
        str, typer.Option("--precision", help="onnx: fp32 (exact profile) or fp16 (for GPUs; drifts ~1e-4).")
    ] = "fp32",
) -> None:
    """Encode sentences (--input) or images (--images) into vectors."""
    from lnserve.app.runtime.engine import Engine

    if (input is None) == (images is None):
        raise UserInputError("give exactly one of --input and --images")
    # read and check the inputs first: bad input fails before a model is loaded
    sentences = read_lines(input) if input is not None else None
    features = load_matrix(images, "image features") if images is not None else None
    engine = Engine.open(model_dir, backend=backend, precision=precision)
    if sentences is not None:
        vectors = engine.encode_sentences(
            sentences, pretokenized=pretokenized, eos=eos, normalize=not no_normalize, batch_size=batch_size
        )
    else:
        assert features is not None
        vectors = engine.encode_images(features)
    save_npy(output, vectors)
    typer.echo(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 vectors to {output}")


def score(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    sentences: Annotated[Path, typer.Option("--sentences", help="Sentence vectors .npy (N x dim).")],
    images: Annotated[Path, typer.Option("--images", help="Image vectors .npy (M x dim).")],
    output: Annotated[Path, typer.Option("--output", help="Output error matrix .npy (N x M).")],
) -> None:
    """Caption x image error matrix with the model's method (order violation or negative cosine)."""
    from lnserve.app.runtime.scoring import error_matrix
    from lnserve.converters.artifact import read_artifact

    artifact = read_artifact(model_dir)
    if artifact.family != "order-embedding":
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
