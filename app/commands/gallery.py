"""``lnserve gallery build / ls / rm``: persistent galleries of one model's embeddings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from lnserve.app.commands.common import BackendOpt, load_matrix, read_lines
from lnserve.app.runtime.engine import DEFAULT_BACKEND
from lnserve.converters.errors import EncodeInputError, UserInputError

gallery_app = typer.Typer(help="Build, list and remove retrieval galleries.", no_args_is_help=True)

DirOpt = Annotated[
    Path | None,
    typer.Option(
        "--galleries-dir",
        envvar="LNSERVE_GALLERIES_DIR",
        help="Gallery root (default ~/.local/share/lnserve/galleries).",
    ),
]


def _store(root: Path | None):  # type: ignore[no-untyped-def]
    from lnserve.app.galleries.store import GalleryStore

    return GalleryStore(root)


def _read_payloads(path: Path, expected: int) -> list[Any]:
    """One JSON value per line; the count must match the items."""
    lines = read_lines(path)
    if len(lines) != expected:
        raise EncodeInputError(f"{path}: {len(lines)} payload lines for {expected} items")
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except ValueError as exc:
            raise EncodeInputError(f"{path}:{n}: not valid JSON ({exc})") from None
    return out


@gallery_app.command("build")
def build(
    name: Annotated[str, typer.Argument(help="Gallery name (letters, digits, '.', '_', '-').")],
    model: Annotated[Path, typer.Option("--model", help="Model artifact directory.")],
    captions: Annotated[Path | None, typer.Option("--captions", help="UTF-8 text, one per line.")] = None,
    images: Annotated[
        Path | None, typer.Option("--images", help="Image features .npy (N x dim_image).")
    ] = None,
    payloads: Annotated[
        Path | None, typer.Option("--payloads", help="JSONL, one payload per item (default: caption text).")
    ] = None,
    pretokenized: Annotated[bool, typer.Option(help="Split captions on whitespace only.")] = False,
    append: Annotated[
        bool, typer.Option("--append", help="Add to an existing gallery of this model.")
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Items encoded and committed per batch.")] = 4096,
    galleries_dir: DirOpt = None,
    backend: BackendOpt = DEFAULT_BACKEND,
) -> None:
    """Encode captions or image features with MODEL and store them as gallery NAME."""
    from lnserve.app.galleries.store import ModelRef
    from lnserve.app.runtime.engine import Engine

    if (captions is None) == (images is None):
        raise UserInputError("give exactly one of --captions and --images")
    texts = read_lines(captions) if captions is not None else None
    feats = load_matrix(images, "image features", mmap=True) if images is not None else None
    n = len(texts) if texts is not None else len(feats)  # type: ignore[arg-type]
    extra = _read_payloads(payloads, n) if payloads is not None else None
    engine = Engine.open(model, backend=backend)  # after the inputs: bad input fails before a model loads
    ref = ModelRef.from_artifact(engine.artifact)
    store = _store(galleries_dir)
    kind = "captions" if texts is not None else "images"
    info = store.create(name, kind=kind, model=ref, exist_ok=append)
    first = info.count
    for start in range(0, n, batch_size):
        stop = min(n, start + batch_size)
        if texts is not None:
            vecs = engine.encode_sentences(texts[start:stop], pretokenized=pretokenized)
            items = [{"text": t} for t in texts[start:stop]]
        else:
            vecs = engine.encode_images(np.array(feats[start:stop], dtype=np.float32))  # type: ignore[index]
            items = [None] * (stop - start)
        store.add_items(
            name,
            vecs,
            ids=[str(first + i) for i in range(start, stop)],
            payloads=extra[start:stop] if extra is not None else items,
        )
    info = store.get(name)
    typer.echo(
        f"gallery {name}: {n} {kind} added ({info.count} total, dim {info.dim}, {info.metric}) "
        f"in {store.root / name}"
    )


@gallery_app.command("ls")
def ls(
    galleries_dir: DirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List galleries: name, kind, items, dim, model and score direction."""
    infos = _store(galleries_dir).list()
    if as_json:
        typer.echo(json.dumps([i.as_dict() for i in infos], indent=2))
        return
    if not infos:
        typer.echo("no galleries")
        return
    typer.echo(f"{'name':24} {'kind':8} {'items':>9} {'dim':>5}  {'model':24} score")
    for i in infos:
        direction = i.as_dict()["score"]["direction"].replace("_", " ")
        typer.echo(f"{i.name:24} {i.kind:8} {i.count:>9} {i.dim:>5}  {i.model:24} {i.metric} ({direction})")


@gallery_app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="Gallery to delete.")],
    galleries_dir: DirOpt = None,
) -> None:
    """Delete a gallery and its files."""
    _store(galleries_dir).remove(name)
    typer.echo(f"removed gallery {name}")


def register(app: typer.Typer) -> None:
    app.add_typer(gallery_app, name="gallery")
