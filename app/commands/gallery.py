"""``lnserve gallery build / ls / rm / check / repair``: persistent galleries of one model's embeddings."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer

from lnserve.errors import UserInputError

from ...converters import bounded_json
from ..runtime.engine import DEFAULT_BACKEND
from ..runtime.errors import EncodeInputError
from .common import (
    BackendOpt,
    PrecisionOpt,
    check_output_dir,
    load_matrix,
    progress_bar,
    read_lines,
)

if TYPE_CHECKING:
    from ..galleries.store import GalleryStore
    from ..runtime.engine import Engine
    from ..runtime.model_ref import ModelRef

gallery_app = typer.Typer(help="Build, list and remove retrieval galleries.", no_args_is_help=True)

DirOpt = Annotated[
    Path | None,
    typer.Option(
        "--galleries-dir",
        help="Gallery root (default: LNSERVE_GALLERIES_DIR, else ~/.local/share/lnserve/galleries).",
        show_default=False,
    ),
]


def _store(root: Path | None) -> GalleryStore:
    """The gallery root and scorer come from the flag, else from the service's own settings (LNSERVE_*)."""
    from ..galleries.store import GalleryStore
    from ..settings import Settings

    settings = Settings()
    return GalleryStore(root if root is not None else settings.galleries_dir, scorer=settings.scorer)


def _read_payloads(path: Path, expected: int) -> list[Any]:
    """One JSON value per line, nested as deep as a stored payload may be; the count must match the items."""
    from ..galleries.rules import PAYLOAD_MAX_DEPTH

    lines = read_lines(path)
    if len(lines) != expected:
        raise EncodeInputError(f"{path}: {len(lines)} payload lines for {expected} items")
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(bounded_json.loads(line, max_depth=PAYLOAD_MAX_DEPTH))
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
    precision: PrecisionOpt = "fp32",
) -> None:
    """Encode captions or image features with MODEL and store them as gallery NAME."""
    import asyncio

    from ..runtime.engine import Engine
    from ..serving.galleries import NewItem, add_items

    if (captions is None) == (images is None):
        raise UserInputError("give exactly one of --captions and --images")
    if galleries_dir is not None:  # the place it writes: refused before any work (as every output flag)
        check_output_dir(galleries_dir, "--galleries-dir")
    texts = read_lines(captions) if captions is not None else None
    feats = load_matrix(images, "image features", mmap=True) if images is not None else None
    n = len(texts) if texts is not None else len(feats)  # type: ignore[arg-type]
    extra = _read_payloads(payloads, n) if payloads is not None else None
    engine = Engine.open(model, backend=backend, precision=precision)  # after the inputs: bad input first
    ref = engine.model_ref()
    store = _store(galleries_dir)
    kind = "captions" if texts is not None else "images"
    info = store.create(name, kind=kind, model=ref, exist_ok=append)
    first = store.next_numbered_id(name)  # not info.count: after a deletion that number is taken
    count = info.count
    with progress_bar(f"gallery {name}: encoding {kind}", n) as advance:
        opened = OpenedModel(engine, ref, pretokenized=pretokenized, progress=advance)
        for start in range(0, n, batch_size):
            items = [
                NewItem(
                    str(first + i),
                    text=texts[i] if texts is not None else None,
                    image=feats[i] if feats is not None else None,
                    payload=extra[i] if extra is not None else None,
                    payload_given=extra is not None,
                )
                for i in range(start, min(n, start + batch_size))
            ]
            count = asyncio.run(add_items(store, name, items, lambda _info: opened)).count
    where = store.root / name
    typer.echo(f"gallery {name}: {n} {kind} added ({count} total, dim {info.dim}, {info.metric}) in {where}")


@dataclass(frozen=True)
class OpenedModel:
    """The model ``gallery build`` opened, embedding its batches (a ``GalleryModel`` of ``serving.galleries``)
    in this thread, with the progress bar advanced as they are encoded."""

    engine: Engine
    ref: ModelRef
    pretokenized: bool
    progress: Callable[[int], None]

    @property
    def name(self) -> str:
        return self.ref.name

    def model_ref(self) -> ModelRef:
        return self.ref

    async def encode(
        self, texts: list[str], images: list[Any]
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        if texts:
            return self.engine.encode_sentences(
                texts, pretokenized=self.pretokenized, progress=self.progress
            ), None
        vecs = self.engine.encode_images(np.array(images, dtype=np.float32))
        self.progress(len(images))
        return None, vecs


@gallery_app.command("ls")
def ls(
    galleries_dir: DirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List galleries: name, kind, items, dim, model and score direction."""
    from ..galleries.layout import CorruptGallery
    from ..runtime.retrieval import score_info

    infos = _store(galleries_dir).list()
    if as_json:
        typer.echo(json.dumps([i.as_dict() for i in infos], indent=2))
        return
    if not infos:
        typer.echo("no galleries")
        return
    typer.echo(f"{'name':24} {'kind':8} {'items':>9} {'dim':>5}  {'model':24} score")
    for i in infos:
        if isinstance(i, CorruptGallery):
            typer.echo(f"{i.name:24} CORRUPT: {i.reason}")
            continue
        direction = score_info(i.metric)["direction"].replace("_", " ")
        typer.echo(f"{i.name:24} {i.kind:8} {i.count:>9} {i.dim:>5}  {i.model:24} {i.metric} ({direction})")


@gallery_app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="Gallery to delete.")],
    galleries_dir: DirOpt = None,
) -> None:
    """Delete a gallery and its files."""
    _store(galleries_dir).remove(name)
    typer.echo(f"removed gallery {name}")


def _valid_name(value: str) -> str:
    from ..galleries.rules import check_gallery_name

    return check_gallery_name(value)


NameArg = Annotated[str, typer.Argument(help="Gallery name.", callback=_valid_name)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
_SHOWN_IDS = 10


@gallery_app.command("check")
def check(name: NameArg, galleries_dir: DirOpt = None, as_json: JsonOpt = False) -> None:
    """Verify gallery NAME offline without changing it: its files, counters and every row against its
    checksum. Exit 0 when healthy, 2 (with the reason) when damaged."""
    from ..galleries.errors import GalleryCorruptError

    report = _store(galleries_dir).check(name)
    if as_json:
        typer.echo(json.dumps(asdict(report), indent=2))
    if not report.ok:
        kept = f"rows 0-{report.good_rows - 1}" if report.good_rows else "no rows"
        raise GalleryCorruptError(name, f"{report.reason} (`lnserve gallery repair {name}` keeps {kept})")
    if as_json:
        return
    legacy = (
        f"; {report.legacy_rows} rows predate checksums and were checked for finite values only"
        if report.legacy_rows
        else ""
    )
    typer.echo(
        f"gallery {name}: ok ({report.count} items in {report.rows} rows, "
        f"{report.verified_rows} verified against their checksums{legacy})"
    )


@gallery_app.command("repair")
def repair(
    name: NameArg,
    galleries_dir: DirOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be dropped; change nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Cut gallery NAME back to its last consistent acknowledged state (rows before the first damaged one)
    and report the items dropped; recreate a missing lock or vector file."""
    report = _store(galleries_dir).repair(name, dry_run=dry_run)
    if as_json:
        typer.echo(json.dumps({**asdict(report), "changed": report.changed}, indent=2))
        return
    if not report.changed:
        typer.echo(f"gallery {name}: nothing to repair ({report.rows_after} rows, all consistent)")
        return
    verb = "would drop" if dry_run else "dropped"
    lines = [f"gallery {name}: {report.reason or 'inconsistent files'}"]
    if report.rows_after < report.rows_before:
        ids = report.dropped_ids
        more = len(ids) - _SHOWN_IDS
        shown = ", ".join(ids[:_SHOWN_IDS]) + (f" and {more} more (--json lists all)" if more > 0 else "")
        lines.append(
            f"{verb} rows {report.rows_after}-{report.rows_before - 1} "
            f"({len(ids)} items{': ' + shown if ids else ''}); {report.rows_after} rows kept"
        )
    lines += [("would have " if dry_run else "") + fix for fix in report.fixed]
    typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    app.add_typer(gallery_app, name="gallery")
