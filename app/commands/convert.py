"""``lnserve convert``: legacy checkpoints -> model artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .checkpoint_paths import npz_file, order_embedding_prefix, plain_file, tables_dir

convert_app = typer.Typer(
    help="Convert legacy Theano checkpoints into lnserve model artifacts.", no_args_is_help=True
)

CellOpt = Annotated[
    str | None,
    typer.Option("--cell", help="Override the cell type (gru, lngru, rlngru, lstm, lnlstm, rlnlstm)."),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing non-empty output directory.")]
NameOpt = Annotated[str | None, typer.Option(help="Model name (default: the output directory's name).")]


@convert_app.command("order-embedding")
def convert_order_embedding(
    prefix: Annotated[
        Path,
        typer.Argument(
            help="Checkpoint prefix (no extension): reads PREFIX.npz and PREFIX.pkl.",
            callback=order_embedding_prefix,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    cell: CellOpt = None,
    name: NameOpt = None,
    force: ForceOpt = False,
) -> None:
    """Convert an order-embedding checkpoint (PREFIX.npz + PREFIX.pkl)."""
    from ...converters.artifact import model_name
    from ...converters.order_embedding import read_order_embedding, write_order_embedding
    from .common import check_output_dir

    check_output_dir(out)
    chosen = model_name(out, name)  # a bad name fails before the checkpoint is read
    model = read_order_embedding(prefix, cell=cell)
    manifest = write_order_embedding(model, out, name=chosen, overwrite=force)
    typer.echo(f"converted {prefix} ({manifest['cell']}, dim {manifest['dims']['dim']}) -> {out}")


@convert_app.command("skip-thoughts")
def convert_skip_thoughts_cmd(
    tables: Annotated[
        Path,
        typer.Option(
            "--tables", help="Directory with utable.npy, btable.npy, dictionary.txt.", callback=tables_dir
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    uni: Annotated[
        Path | None, typer.Option("--uni", help="uni_skip.npz (its .npz.pkl beside it).", callback=npz_file)
    ] = None,
    bi: Annotated[
        Path | None, typer.Option("--bi", help="bi_skip.npz (its .npz.pkl beside it).", callback=npz_file)
    ] = None,
    cell: CellOpt = None,
    name: NameOpt = None,
    force: ForceOpt = False,
) -> None:
    """Convert skip-thoughts uni-skip and/or bi-skip (both give combine-skip)."""
    from rich.progress import TaskProgressColumn

    from ...converters.artifact import model_name
    from ...converters.skip_thoughts import convert_skip_thoughts
    from .common import check_output_dir, labelled_progress, stderr_progress

    check_output_dir(out)
    chosen = model_name(out, name)  # a bad name fails before the tables are read
    with stderr_progress(TaskProgressColumn()) as bar:
        progress = labelled_progress(bar, "copying ")
        manifest = convert_skip_thoughts(
            uni=uni,
            bi=bi,
            tables=tables,
            out=out,
            name=chosen,
            cell=cell,
            progress=progress,
            overwrite=force,
        )
    parts = ", ".join(f"{k} {v['cell']} {v['dim']}" for k, v in manifest["parts"].items())
    typer.echo(f"converted skip-thoughts ({parts}; output dim {manifest['dims']['output_dim']}) -> {out}")


@convert_app.command("skip-thoughts-training")
def convert_skip_thoughts_training_cmd(
    model: Annotated[
        Path,
        typer.Argument(
            help="MODEL.npz as training/train.py saves it (MODEL.npz.pkl beside it).", callback=npz_file
        ),
    ],
    dictionary: Annotated[
        Path,
        typer.Option(
            "--dictionary",
            help="The vocab.py dictionary pkl (worddict, wordcount).",
            callback=plain_file,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    word2vec: Annotated[
        Path | None,
        typer.Option(
            "--word2vec",
            help="word2vec binary file (GoogleNews, 300-d): expand the vocabulary.",
            callback=plain_file,
        ),
    ] = None,
    cell: CellOpt = None,
    name: NameOpt = None,
    force: ForceOpt = False,
) -> None:
    """Convert a skip-thoughts training/-format checkpoint (the layer-norm LN-GRU release)."""
    from rich.progress import TaskProgressColumn

    from ...converters.artifact import model_name
    from ...converters.skip_thoughts_training import convert_skip_thoughts_training
    from .common import check_output_dir, labelled_progress, stderr_progress

    check_output_dir(out)
    with stderr_progress(TaskProgressColumn()) as bar:
        progress = labelled_progress(bar)
        manifest = convert_skip_thoughts_training(
            model=model,
            dictionary=dictionary,
            word2vec=word2vec,
            out=out,
            name=model_name(out, name),
            cell=cell,
            progress=progress,
            overwrite=force,
        )
    vocab, part = manifest["vocabulary"], manifest["parts"]["uni"]
    summary = f"{part['cell']} {part['dim']}; {vocab['model_words']:,} model words"
    if manifest["expansion"]:
        fit = manifest["expansion"]
        summary += (
            f" + {vocab['expansion_words']:,} from word2vec (fit on {fit['words_shared']:,} shared words, "
            f"residual rms {fit['residual_rms']:.3g})"
        )
    typer.echo(f"converted skip-thoughts training checkpoint ({summary}) -> {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(convert_app, name="convert")
