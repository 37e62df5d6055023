"""``lnserve eval``: the order-embedding paper's retrieval protocol (spec §8) on captions + image features.

``lnserve eval`` is a group that runs the retrieval protocol when no subcommand is named (its options as
before), so ``lnserve eval skip-thoughts`` (``eval_skip_thoughts``) sits beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.exceptions import MissingParameter

from lnserve.errors import UserInputError

from ..runtime.engine import DEFAULT_BACKEND
from ..runtime.errors import EncodeInputError
from .common import BackendOpt, PrecisionOpt, check_output, load_matrix, read_lines, save_text


def evaluate(
    ctx: typer.Context,
    model: Annotated[
        Path | None, typer.Option("--model", help="Order-embedding model artifact directory.")
    ] = None,
    captions: Annotated[
        Path | None, typer.Option("--captions", help="UTF-8 text, 5 captions per image, in order.")
    ] = None,
    images: Annotated[
        Path | None, typer.Option("--images", help="Image features .npy (N x dim_image).")
    ] = None,
    folds: Annotated[int, typer.Option("--folds", min=1, help="Folds of 1,000 images / 5,000 captions.")] = 5,
    pretokenized: Annotated[bool, typer.Option(help="Split on whitespace only (the original).")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON.")] = None,
    backend: BackendOpt = DEFAULT_BACKEND,
    precision: PrecisionOpt = "fp32",
) -> None:
    """R@1/5/10, medr and meanr for caption->image and image->caption, per fold and averaged.

    `lnserve eval skip-thoughts ...` runs the skip-thoughts papers' protocols instead."""
    if ctx.invoked_subcommand is not None:
        return
    for value, flag in ((model, "--model"), (captions, "--captions"), (images, "--images")):
        if value is None:
            raise MissingParameter(ctx=ctx, param_hint=f"'{flag}'", param_type="option")
    assert model is not None and captions is not None and images is not None
    from ...converters.families import RETRIEVAL_EVAL
    from ..runtime.engine import Engine
    from ..runtime.evaluation import CAPTIONS_PER_IMAGE as CPI
    from ..runtime.evaluation import i2t, mean_stats, plan_folds, t2i
    from ..runtime.retrieval import metric_for, score_info

    if json_out is not None and str(json_out) != "-":
        check_output(json_out, "--json")
    texts = read_lines(captions)
    feats = load_matrix(images, "image features")
    engine = Engine.open(model, backend=backend, precision=precision)  # after the inputs: bad input first
    if RETRIEVAL_EVAL not in engine.family.evaluations:
        raise UserInputError("eval needs an order-embedding model (caption <-> image retrieval)")
    if len(texts) != CPI * feats.shape[0]:
        raise EncodeInputError(
            f"{len(texts)} captions for {feats.shape[0]} images: need exactly {CPI} captions per image, "
            f"captions {CPI}i..{CPI}i+{CPI - 1} describing image i"
        )
    plan = plan_folds(feats.shape[0], folds)
    for note in plan.notes:
        typer.echo(f"note: {note}", err=True)
    sent = engine.encode_sentences(texts, pretokenized=pretokenized)
    imgs = engine.encode_images(feats)
    per_fold: list[dict[str, Any]] = []
    for a, b in plan.folds:
        errs = engine.score(sent[CPI * a : CPI * b], imgs[a:b])
        per_fold.append({"images": [a, b], "t2i": t2i(errs), "i2t": i2t(errs)})
    result: dict[str, Any] = {
        "model": engine.artifact.name,
        "precision": engine.precision,  # an int8 run's report is compared with fp32's
        "score": score_info(metric_for(engine.method, engine.family.name)),
        "protocol": "order-embedding evaluation.t2i/i2t, stable sort, medr=floor(median)+1, meanr=mean+1",
        "notes": plan.notes,
        "folds": [{**f, "t2i": f["t2i"].as_dict(), "i2t": f["i2t"].as_dict()} for f in per_fold],
        "t2i": mean_stats([f["t2i"] for f in per_fold]).as_dict(),
        "i2t": mean_stats([f["i2t"] for f in per_fold]).as_dict(),
    }
    _print_table(result)
    text = json.dumps(result, indent=2)
    if json_out is None:
        typer.echo(text)
    elif str(json_out) == "-":
        sys.stdout.write(text + "\n")
    else:
        save_text(json_out, text + "\n", "--json")


def _print_table(result: dict[str, Any]) -> None:
    typer.echo(f"{'fold':>5} {'direction':16} {'R@1':>7} {'R@5':>7} {'R@10':>7} {'medr':>6} {'meanr':>8}")
    rows = [(str(i), f) for i, f in enumerate(result["folds"])]
    if len(rows) > 1:
        rows.append(("mean", {"t2i": result["t2i"], "i2t": result["i2t"]}))
    for label, f in rows:
        for key, direction in (("t2i", "caption->image"), ("i2t", "image->caption")):
            s = f[key]
            typer.echo(
                f"{label:>5} {direction:16} {s['r1']:7.2f} {s['r5']:7.2f} {s['r10']:7.2f} "
                f"{s['medr']:6.1f} {s['meanr']:8.2f}"
            )


def register(app: typer.Typer) -> None:
    from . import eval_skip_thoughts

    group = typer.Typer(invoke_without_command=True, no_args_is_help=False)
    group.callback()(evaluate)
    eval_skip_thoughts.register(group)
    app.add_typer(group, name="eval")
