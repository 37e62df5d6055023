"""``lnserve convert``: legacy checkpoints -> model artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    prefix: Annotated[Path, typer.Argument(help="Checkpoint prefix: reads PREFIX.npz and PREFIX.pkl.")],
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    cell: CellOpt = None,
    name: NameOpt = None,
    force: ForceOpt = False,
) -> None:
    """Convert an order-embedding checkpoint (PREFIX.npz + PREFIX.pkl)."""
    from lnserve.app.commands.common import check_output_dir
    from lnserve.converters.artifact import model_name
    from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding

    check_output_dir(out)
    model = read_order_embedding(prefix, cell=cell)
    manifest = write_order_embedding(model, out, name=model_name(out, name), overwrite=force)
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
    name: NameOpt = None,
    force: ForceOpt = False,
) -> None:
    """Convert skip-thoughts uni-skip and/or bi-skip (both give combine-skip)."""
    from rich.progress import TaskID, TaskProgressColumn

    from lnserve.app.commands.common import check_output_dir, stderr_progress
    from lnserve.converters.artifact import model_name
    from lnserve.converters.skip_thoughts import convert_skip_thoughts

    check_output_dir(out)
    with stderr_progress(TaskProgressColumn()) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(f"copying {label}", total=total)
            bar.update(tasks[label], completed=done)

        manifest = convert_skip_thoughts(
            uni=uni,
            bi=bi,
            tables=tables,
            out=out,
            name=model_name(out, name),
            cell=cell,
            progress=progress,
            overwrite=force,
        )
    parts = ", ".join(f"{k} {v['cell']} {v['dim']}" for k, v in manifest["parts"].items())
    typer.echo(f"converted skip-thoughts ({parts}; output dim {manifest['dims']['output_dim']}) -> {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(convert_app, name="convert")
