"""The ``lnserve`` command line (typer). Errors print one line on stderr; ``--debug`` shows the traceback.

Exit codes: 0 success, 2 bad usage or bad input, 1 internal failure.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import click
import numpy as np
import typer

from converters.errors import EncodeInputError, LnserveError, UserInputError

app = typer.Typer(
    name="lnserve",
    help="Convert, export, run and serve the legacy LN-GRU / RMS-GRU encoders.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
convert_app = typer.Typer(
    help="Convert legacy Theano checkpoints into lnserve model artifacts.", no_args_is_help=True
)
app.add_typer(convert_app, name="convert")

CellOpt = Annotated[
    str | None,
    typer.Option("--cell", help="Override the cell type (gru, lngru, rlngru, lstm, lnlstm, rlnlstm)."),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing non-empty output directory.")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Inference backend: onnx or torch.")]


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    """lnserve: faithful serving of the layer-normalisation-era encoders."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="lnserve: %(levelname)s: %(message)s"
    )


def _progress_bar():  # type: ignore[no-untyped-def]
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


@convert_app.command("order-embedding")
def convert_order_embedding(
    prefix: Annotated[Path, typer.Argument(help="Checkpoint prefix: reads PREFIX.npz and PREFIX.pkl.")],
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    cell: CellOpt = None,
    name: Annotated[str | None, typer.Option(help="Model name (default: the prefix's file name).")] = None,
    force: ForceOpt = False,
) -> None:
    """Convert an order-embedding checkpoint (PREFIX.npz + PREFIX.pkl)."""
    from converters.order_embedding import read_order_embedding, write_order_embedding

    model = read_order_embedding(prefix, cell=cell)
    manifest = write_order_embedding(model, out, name=name or prefix.name, overwrite=force)
    typer.echo(f"converted {prefix} ({manifest['cell']}, dim {manifest['dims']['dim']}) -> {out}")


@convert_app.command("skip-thoughts")
def convert_skip_thoughts_cmd(
    tables: Annotated[
        Path, typer.Option("--tables", help="Directory with utable.npy, btable.npy, dictionary.txt.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    uni: Annotated[Path | None, typer.Option("--uni", help="uni_skip.npz (its .npz.pkl beside it).")] = None,
    bi: Annotated[Path | None, typer.Option("--bi", help="bi_skip.npz (its .npz.pkl beside it).")] = None,
    cell: CellOpt = None,
    name: Annotated[
        str | None, typer.Option(help="Model name (default: the output directory's name).")
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Convert skip-thoughts uni-skip and/or bi-skip (both give combine-skip)."""
    from converters.skip_thoughts import convert_skip_thoughts

    with _progress_bar() as bar:
        tasks: dict[str, int] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(f"copying {label}", total=total)
            bar.update(tasks[label], completed=done)

        manifest = convert_skip_thoughts(
            uni=uni,
            bi=bi,
            tables=tables,
            out=out,
            name=name or out.name,
            cell=cell,
            progress=progress,
            overwrite=force,
        )
    parts = ", ".join(f"{k} {v['cell']} {v['dim']}" for k, v in manifest["parts"].items())
    typer.echo(f"converted skip-thoughts ({parts}; output dim {manifest['dims']['output_dim']}) -> {out}")


def _read_lines(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EncodeInputError(f"{path}: cannot read input ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodeInputError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise EncodeInputError(f"{path}: input file is empty (expected one sentence per line)")
    return [line.removesuffix("\r") for line in lines]


def _load_matrix(path: Path, what: str) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise EncodeInputError(f"{path}: cannot read {what} as a .npy array ({exc})") from None
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.floating):
        raise EncodeInputError(f"{path}: {what} must be a 2-d float array, got {arr.dtype} {arr.shape}")
    return arr.astype(np.float32, copy=False)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    """Write atomically: a failure never leaves a partial output file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.ascontiguousarray(arr, dtype=np.float32))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@app.command()
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
    backend: BackendOpt = "torch",
) -> None:
    """Encode sentences (--input) or images (--images) into vectors."""
    from app.runtime.engine import Engine

    if (input is None) == (images is None):
        raise UserInputError("give exactly one of --input and --images")
    engine = Engine.open(model_dir, backend=backend)
    if input is not None:
        sentences = _read_lines(input)
        vectors = engine.encode_sentences(
            sentences, pretokenized=pretokenized, eos=eos, normalize=not no_normalize, batch_size=batch_size
        )
    else:
        assert images is not None
        vectors = engine.encode_images(_load_matrix(images, "image features"))
    _save_npy(output, vectors)
    typer.echo(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 vectors to {output}")


@app.command()
def score(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    sentences: Annotated[Path, typer.Option("--sentences", help="Sentence vectors .npy (N x dim).")],
    images: Annotated[Path, typer.Option("--images", help="Image vectors .npy (M x dim).")],
    output: Annotated[Path, typer.Option("--output", help="Output error matrix .npy (N x M).")],
) -> None:
    """Caption x image error matrix with the model's method (order violation or negative cosine)."""
    from app.runtime.scoring import error_matrix
    from converters.artifact import read_artifact

    artifact = read_artifact(model_dir)
    if artifact.family != "order-embedding":
        raise UserInputError("score needs an order-embedding model")
    s, v = _load_matrix(sentences, "sentence vectors"), _load_matrix(images, "image vectors")
    dim = artifact.manifest["dims"]["dim"]
    if s.shape[1] != dim or v.shape[1] != dim:
        raise EncodeInputError(f"vectors must have {dim} columns, got {s.shape} and {v.shape}")
    errs = error_matrix(s, v, artifact.manifest["options"]["method"])
    _save_npy(output, errs)
    typer.echo(f"wrote {errs.shape[0]} x {errs.shape[1]} error matrix to {output}")


def main() -> None:
    """Console entry point: one-line errors, exit 2 for bad input, 1 for internal failures."""
    debug = "--debug" in sys.argv[1:]
    try:
        app(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        typer.echo("lnserve: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if debug:
            raise
        typer.echo(f"lnserve: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except LnserveError as exc:
        if debug:
            raise
        typer.echo(f"lnserve: error [{exc.code}]: {exc}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            raise
        typer.echo(f"lnserve: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
