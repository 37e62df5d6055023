"""``lnserve export``, ``calibrate`` and ``info``: ONNX graphs and int8 calibration into an artifact, and
what a model runs on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from lnserve.errors import brief

from ...converters.int8_calibration import SECTION
from ..runtime.engine import DEFAULT_BACKEND
from ..runtime.errors import EncodeInputError
from ..runtime.onnx_export import DEFAULT_FORM
from .common import PrecisionOpt, progress_bar, read_lines


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


def calibrate(
    model_dir: Annotated[Path, typer.Argument(help="Model artifact directory.")],
    texts: Annotated[
        Path,
        typer.Option("--texts", help="UTF-8 text, one sentence per line: what the model will encode."),
    ],
    size: Annotated[
        int, typer.Option("--size", min=1, help="Sentences to use: the file's first SIZE non-blank lines.")
    ] = 5000,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="Intra-op threads.")] = None,
) -> None:
    """Measure each recurrent state feature's range on real text, for --precision int8 (recorded in the
    artifact's manifest; fp32 vectors and fp32 gallery pins are unchanged)."""
    from lnserve.hashing import sha256_file

    from ..runtime.calibration import calibrate as run_calibration

    sentences = [line for line in read_lines(texts) if line.strip()][:size]
    if not sentences:
        raise EncodeInputError(f"{texts}: no sentence to calibrate on (every line is blank)")
    with progress_bar("calibrating", len(sentences)) as advance:
        section = run_calibration(
            model_dir,
            sentences,
            texts_name=texts.name,
            texts_sha256=sha256_file(texts),
            threads=threads,
            progress=advance,
        )
    typer.echo(
        f"{model_dir / section['file']}: int8 state peaks from {section['size']} sentences of {texts.name}"
    )


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
        "fused_forms": getattr(engine.backend, "fused_forms", None) or None,  # part -> sequence or step op
        "int8_scheme": getattr(engine.backend, "int8_scheme", None),  # int8: this CPU's activation scheme
        "int8_calibration": _calibration_summary(m),
        "onnx_exported": "onnx" in m,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    for key, value in summary.items():
        typer.echo(f"{key:>16}: {value}")


def _calibration_summary(manifest: dict[str, Any]) -> str | None:
    """What ``lnserve calibrate`` measured the int8 state peaks on, if it ran (``calibration_tag`` has
    checked the section when an int8 engine opened; shown as text, never trusted further)."""
    section = manifest.get(SECTION)
    if not isinstance(section, dict):
        return None
    return f"{brief(section.get('size'), 20)} sentences of {brief(section.get('texts'), 80)}"


def register(app: typer.Typer) -> None:
    app.command()(export)
    app.command()(calibrate)
    app.command()(info)
