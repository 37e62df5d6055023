"""``lnserve pull``: download a published checkpoint set and convert it into ``DIR/NAME`` in one step."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from lnserve.errors import UserInputError

from .common import check_output_dir, stderr_progress


def pull(
    name: Annotated[str | None, typer.Argument(help="Catalog name (see --list).", show_default=False)] = None,
    root: Annotated[
        Path,
        typer.Option("--dir", help="Directory that receives the artifact DIR/NAME (what compose mounts)."),
    ] = Path("artifacts"),
    list_: Annotated[bool, typer.Option("--list", help="Show the published sets and exit.")] = False,
    from_dir: Annotated[
        Path | None,
        typer.Option("--from", help="Convert files already downloaded into this directory (no network)."),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            envvar="LNSERVE_PULL_BASE_URL",
            help="Mirror: fetch every file from BASE_URL/<file name> instead of its published address.",
        ),
    ] = None,
    sha256: Annotated[
        list[str] | None,
        typer.Option(
            "--sha256", help="FILE=HEX: require this sha256 for FILE (repeatable; wins over the catalog)."
        ),
    ] = None,
    cell: Annotated[str | None, typer.Option("--cell", help="Override the detected cell type.")] = None,
    retries: Annotated[int, typer.Option("--retries", min=1, help="Tries per file.")] = 5,
    backoff: Annotated[
        float,
        typer.Option("--backoff", min=0.0, help="Seconds before the 2nd try; doubles each time, jittered."),
    ] = 1.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            "--stall-timeout",
            min=0.1,
            envvar="LNSERVE_PULL_STALL_TIMEOUT",
            help="Seconds a try may go without receiving 1 KiB before it counts as stalled (and is retried).",
        ),
    ] = 30.0,
    deadline: Annotated[
        float,
        typer.Option(
            "--deadline",
            min=1.0,
            envvar="LNSERVE_PULL_DEADLINE",
            help="Seconds the whole download (every file, every try) may take.",
        ),
    ] = 6 * 3600.0,
    keep_downloads: Annotated[
        bool,
        typer.Option("--keep-downloads", help="Keep the raw files in DIR/.downloads/NAME after converting."),
    ] = False,
    export: Annotated[
        bool, typer.Option("--export/--no-export", help="Export to ONNX when available.")
    ] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DIR/NAME.")] = False,
    dictionary: Annotated[
        Path | None,
        typer.Option("--dictionary", help="Training-format sets (ln-skip): the vocab.py dictionary pkl."),
    ] = None,
    word2vec: Annotated[
        Path | None,
        typer.Option("--word2vec", help="Training-format sets: a word2vec file to expand the vocabulary."),
    ] = None,
) -> None:
    """Download a published checkpoint set and convert it into a servable model artifact DIR/NAME."""
    from ..pull.catalog import get_entry

    if list_:
        _print_catalog()
        return
    if name is None:
        raise UserInputError("give a NAME to pull (see `lnserve pull --list`)")
    check_output_dir(root, "--dir")
    from ..pull.download import Limits, RetryPolicy
    from ..pull.install import PullOptions
    from ..pull.install import pull as run_pull

    entry = get_entry(name)
    options = PullOptions(
        base_url=base_url,
        sha256=_parse_sha256(sha256 or []),
        retry=RetryPolicy(attempts=retries, backoff=backoff),
        limits=Limits(stall=stall_timeout, deadline_s=deadline),
        cell=cell,
        export=export,
        keep_downloads=keep_downloads,
        dictionary=dictionary,
        word2vec=word2vec,
    )
    from rich.progress import DownloadColumn, TaskID, TransferSpeedColumn

    with stderr_progress(DownloadColumn(), TransferSpeedColumn()) as bar:
        tasks: dict[str, TaskID] = {}

        def for_file(filename: str) -> Callable[[int, int | None], None]:
            def update(done: int, total: int | None) -> None:
                if filename not in tasks:
                    tasks[filename] = bar.add_task(filename, total=total)
                bar.update(tasks[filename], completed=done, total=total)

            return update

        manifest = run_pull(
            entry, root, options=options, from_dir=from_dir, overwrite=force, progress=for_file
        )
    out = root / entry.name
    files = manifest["pull"]["files"]
    verified = sum(1 for f in files.values() if f["verified"])
    typer.echo(
        f"pulled {entry.name} ({len(files)} files, {verified} verified against a known sha256) "
        f"-> {out.resolve()}"
    )
    typer.echo(f"serve it with: lnserve serve --models {out}")


def _parse_sha256(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        fname, sep, hexdigest = item.partition("=")
        hexdigest = hexdigest.strip().lower()
        if (
            not sep
            or not fname
            or len(hexdigest) != 64
            or any(c not in "0123456789abcdef" for c in hexdigest)
        ):
            raise UserInputError(f"--sha256 {item!r}: expected FILE=HEX with 64 hex digits")
        out[fname.strip()] = hexdigest
    return out


def _print_catalog() -> None:
    from rich.console import Console
    from rich.table import Table

    from ..pull.catalog import CATALOG

    table = Table("name", "family", "cell", "files", "size", "description", box=None, pad_edge=False)
    for e in CATALOG.values():
        table.add_row(e.name, e.family, e.cell, ", ".join(e.local_names), e.size_label(), e.description)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)


def register(app: typer.Typer) -> None:
    app.command()(pull)
