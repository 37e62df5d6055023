"""``lnserve train order-embedding`` (train or fine-tune with the original recipe) and ``lnserve train
world`` (write the synthetic demo world)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from lnserve.errors import UserInputError
from lnserve.extras import require

from .common import check_output_dir, load_matrix, read_lines

train_app = typer.Typer(help="Train or fine-tune encoders; generate the demo world.", no_args_is_help=True)

DEMO_DESCRIPTION = (
    "DEMO model trained by lnserve on a synthetic world of coloured shapes (app/training/world.py): "
    "it knows only that world's words, e.g. 'a red circle on the left'"
)


def _pairs(captions: Path, images: Path) -> Any:
    from ..training.trainer import PairData

    return PairData(read_lines(captions), load_matrix(images, "image features"))


def _load_data(
    world: str | None,
    captions: Path | None,
    images: Path | None,
    dev_captions: Path | None,
    dev_images: Path | None,
) -> tuple[Any, Any, str]:
    """(train, dev or None, data label) from --world or from the caption/feature files."""
    from ..training.trainer import PairData
    from ..training.world import DEMO_WORLD_SEED, SPLITS, World

    if world is not None:
        if captions or images or dev_captions or dev_images:
            raise UserInputError("give either --world or --captions/--images, not both")
        if world == "demo":
            w = World(DEMO_WORLD_SEED)
            tr, dv = w.split("train", SPLITS["train"]), w.split("dev", SPLITS["dev"])
            return PairData(tr.captions, tr.images), PairData(dv.captions, dv.images), "world:demo"
        root = Path(world)
        return (
            _pairs(root / "train_caps.txt", root / "train_ims.npy"),
            _pairs(root / "dev_caps.txt", root / "dev_ims.npy"),
            f"world:{root.name}",
        )
    if captions is None or images is None:
        raise UserInputError("give --captions and --images (or --world demo | --world DIR)")
    if (dev_captions is None) != (dev_images is None):
        raise UserInputError("give both --dev-captions and --dev-images, or neither")
    dev = _pairs(dev_captions, dev_images) if dev_captions and dev_images else None
    return _pairs(captions, images), dev, "custom"


def _from_artifact(path: Path, cfg: Any, method: str | None) -> tuple[Any, dict[str, Any]]:
    """Recipe fields the artifact fixes (cell, dims, method, pRMS) and the Trainer's starting point."""
    from ...converters.artifact import read_artifact
    from ...converters.families import family_of
    from ..runtime.torch_backend import build_module

    art = read_artifact(path)
    if not family_of(art.family).trainable:
        raise UserInputError(f"{path}: fine-tuning needs an order-embedding artifact, not {art.family}")
    m = art.manifest
    if m["cell"] not in ("gru", "lngru", "rlngru"):
        raise UserInputError(f"{path}: cell {m['cell']!r} cannot be trained here (gru, lngru, rlngru)")
    own = m["options"]["method"]
    if method not in (None, own):
        raise UserInputError(f"{path}: the model was trained with --method {own}; fine-tune with the same")
    cfg = replace(
        cfg,
        cell=m["cell"],
        dim=m["dims"]["dim"],
        dim_word=m["dims"]["dim_word"],
        method=own,
        partial_rms=art.partial_rms,
    )
    kwargs = {
        "worddict": art.read_json("vocab.json")["worddict"],
        "n_words": m["dims"]["n_words"],
        "init_state": build_module(art).state_dict(),
        "use_abs": bool(m["options"]["abs"]),
    }
    return cfg, kwargs


@train_app.command("order-embedding")
def train_order_embedding(
    out: Annotated[Path, typer.Option("--out", help="Output artifact directory.")],
    captions: Annotated[Path | None, typer.Option(help="Training captions, k per image, in order.")] = None,
    images: Annotated[Path | None, typer.Option(help="Training image features .npy (N x dim_image).")] = None,
    dev_captions: Annotated[Path | None, typer.Option(help="Dev captions (validation).")] = None,
    dev_images: Annotated[Path | None, typer.Option(help="Dev image features .npy.")] = None,
    world: Annotated[
        str | None, typer.Option(help="'demo' (generate the synthetic world) or a `train world` directory.")
    ] = None,
    cell: Annotated[str, typer.Option(help="gru, lngru or rlngru.")] = "gru",
    init: Annotated[str, typer.Option(help="Recurrent init: orthogonal, identity, chain, fbchain.")] = (
        "orthogonal"
    ),
    gain: Annotated[
        float | None, typer.Option(help="Init gain (chain: alpha 1.02; fbchain: beta 0.04; else 1).")
    ] = None,
    init_diag: Annotated[float, typer.Option(help="The a of chain/fbchain (a * I).")] = 0.0,
    dim: Annotated[int, typer.Option(min=1, help="Embedding / hidden size.")] = 1024,
    dim_word: Annotated[int, typer.Option(min=1, help="Word vector size.")] = 300,
    method: Annotated[str | None, typer.Option(help="order (default) or cosine.")] = None,
    margin: Annotated[
        float | None, typer.Option(help="Hinge margin (default 0.05 order, 0.2 cosine).")
    ] = None,
    epochs: Annotated[int, typer.Option(min=1)] = 100,
    batch_size: Annotated[int, typer.Option(min=2)] = 128,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    grad_clip: Annotated[float, typer.Option(help="Per-gradient norm clip.")] = 2.0,
    valid_freq: Annotated[int, typer.Option(min=1, help="Updates between validations.")] = 300,
    seed: Annotated[int, typer.Option(help="Initial weights and batch order.")] = 1234,
    partial_rms: Annotated[
        float, typer.Option(help="pRMSNorm: statistic over the first floor(p*d) features (rlngru).")
    ] = 1.0,
    from_artifact: Annotated[Path | None, typer.Option(help="Fine-tune this converted artifact.")] = None,
    legacy_out: Annotated[Path | None, typer.Option(help="Also write PREFIX.npz + PREFIX.pkl.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from OUT.train/checkpoint.pt.")] = False,
    max_steps: Annotated[
        int | None, typer.Option(min=0, help="Stop after this many updates in total (resumable).")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "auto",
    name: Annotated[
        str | None, typer.Option(help="Model name (default: the output directory's name).")
    ] = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Mark the artifact as the synthetic-world demo.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output directory.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Train (or fine-tune with --from-artifact) an order-embedding model; write an artifact."""
    require("torch", "torch", "lnserve train order-embedding")  # before any file is read or written
    from ...converters.artifact import model_name
    from ..training.checkpoint import checkpoint_dir, load_checkpoint
    from ..training.trainer import TrainConfig, Trainer, resolve_device, write_trained

    check_output_dir(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise UserInputError(f"{out}: output directory exists and is not empty (use --force to replace it)")
    chosen = model_name(out, name)  # a bad name fails before training, not after it
    cfg = TrainConfig(
        cell=cell,
        init=init,
        gain=gain,
        init_diag=init_diag,
        dim=dim,
        dim_word=dim_word,
        method=method or "order",
        margin=margin,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        grad_clip=grad_clip,
        seed=seed,
        valid_freq=valid_freq,
        partial_rms=partial_rms,
    )
    train, dev, data_label = _load_data(world, captions, images, dev_captions, dev_images)
    kwargs: dict[str, Any] = {}
    if from_artifact is not None:
        cfg, kwargs = _from_artifact(from_artifact, cfg, method)
    trainer = Trainer(cfg, train, dev, device=resolve_device(device), **kwargs)
    ckpt = checkpoint_dir(out)
    if resume:
        trainer.restore(load_checkpoint(ckpt))
    with _progress(quiet) as update:
        result = trainer.run(checkpoints=ckpt, max_steps=max_steps, on_update=update)
    if not result.finished:
        typer.echo(f"stopped after {result.step} updates; continue with --resume (checkpoint in {ckpt})")
        return
    training = {"data": data_label, "from_artifact": str(from_artifact) if from_artifact else None}
    write_trained(
        result,
        trainer,
        out,
        name=chosen,
        data=data_label,
        demo=demo,
        description=DEMO_DESCRIPTION if demo else f"trained by lnserve on {data_label}",
        training=training,
        legacy_prefix=legacy_out,
        overwrite=force or resume,
    )
    dev_text = ""
    if result.best_dev:
        d = result.best_dev
        dev_text = f"; dev caption->image R@1 {d['r1']:.2f} R@5 {d['r5']:.2f} R@10 {d['r10']:.2f}"
    typer.echo(f"trained {cfg.cell} ({result.step} updates, best step {result.best_step}{dev_text}) -> {out}")


class _progress:
    """A rich progress bar over all updates, showing the loss and the last dev recall sum."""

    def __init__(self, quiet: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("epoch {task.fields[epoch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4f}  dev R@1+5+10 {task.fields[recall]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=quiet or not sys.stderr.isatty(),
        )
        self.task: Any = None

    def __enter__(self) -> Any:
        self.bar.__enter__()
        return self.update

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, p: Any) -> None:
        fields = {
            "epoch": f"{p.epoch + 1}/{p.epochs}",
            "loss": p.loss,
            "recall": "-" if p.recall is None else f"{p.recall:.1f}",
        }
        if self.task is None:
            total = p.steps_per_epoch * p.epochs
            self.task = self.bar.add_task("train", total=total, completed=p.step - 1, **fields)
        self.bar.update(self.task, completed=p.step, **fields)


@train_app.command("world")
def world_cmd(
    out: Annotated[Path, typer.Option("--out", help="Directory for the world's splits.")],
    seed: Annotated[int | None, typer.Option(help="World seed (default: the demo's).")] = None,
) -> None:
    """Write the synthetic demo world: {train,dev,test}_caps.txt, _ims.npy, _scenes.jsonl, world.json."""
    from ..training.world import DEMO_WORLD_SEED, write_world

    check_output_dir(out)
    info = write_world(out, seed=DEMO_WORLD_SEED if seed is None else seed)
    sizes = ", ".join(f"{k} {v}" for k, v in info["splits"].items())
    typer.echo(f"world (seed {info['seed']}; images: {sizes}; dim_image {info['dim_image']}) -> {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
