"""``lnserve export`` and ``lnserve info``: ONNX graphs into an artifact, and what a model runs on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..runtime.engine import DEFAULT_BACKEND
from ..runtime.onnx_export import DEFAULT_FORM
from .common import PrecisionOpt


def export(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    opset: Annotated[int, typer.Option("--opset", min=17, help="ONNX opset.")] = 18,
    form: Annotated[
        str, typer.Option("--form", help="Graph form: scan (default), loop, or native (plain gru only).")
    ] = DEFAULT_FORM,
) -> None:
    """Export the artifact's encoders to ONNX (written into the artifact, recorded in its manifest)."""
    from lnserve.errors import UserInputError

    from ..runtime.onnx_export import export_onnx

    if form not in ("scan", "loop", "native"):
        raise UserInputError(f"--form must be scan, loop or native, not {form!r}")
    manifest = export_onnx(model_dir, opset=opset, form=form)
    for part, entry in manifest["onnx"]["graphs"].items():
        typer.echo(f"{part}: {model_dir / entry['file']}")


def info(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    backend: Annotated[str, typer.Option("--backend", help="onnx or torch.")] = DEFAULT_BACKEND,
    provider: Annotated[
        list[str] | None, typer.Option("--provider", help="Execution provider(s) to ask for, in order.")
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail if the first provider is not obtained.")
    ] = False,
    precision: PrecisionOpt = "fp32",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Describe a model and the execution provider(s) its sessions actually got."""
    from ..runtime.engine import Engine

    engine = Engine.open(model_dir, backend=backend, providers=provider, strict=strict, precision=precision)
    m = engine.artifact.manifest
    summary = {
        "name": engine.artifact.name,
        "family": m["family"],
        "demo": m.get("demo", False),
        "cell": m.get("cell") or {k: v["cell"] for k, v in m.get("parts", {}).items()},
        "dims": m["dims"],
        "tokenizer": m["tokenizer"],
        "defaults": m["defaults"],
        "backend": engine.backend.name,
        "providers": engine.backend.providers,
        "precision": getattr(engine.backend, "precision", "fp32"),
        "graph": getattr(engine.backend, "graph", None),
        "int8_scheme": getattr(engine.backend, "int8_scheme", None),  # int8: this CPU's activation scheme
        "onnx_exported": "onnx" in m,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    for key, value in summary.items():
        typer.echo(f"{key:>14}: {value}")


def register(app: typer.Typer) -> None:
    app.command()(export)
    app.command()(info)
