"""``lnserve serve``: the HTTP service under uvicorn. Flags override ``LNSERVE_*`` environment settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def serve(
    models: Annotated[
        list[Path] | None,
        typer.Option(
            "--models", help="Model artifact directory (repeat for several). Default: the demo model."
        ),
    ] = None,
    default_model: Annotated[
        str | None, typer.Option("--default-model", help="Name of the default model.")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000).")] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Inference backend: onnx or torch.")
    ] = None,
    galleries_dir: Annotated[
        Path | None,
        typer.Option("--galleries-dir", help="Gallery root (default ~/.local/share/lnserve/galleries)."),
    ] = None,
) -> None:
    """Serve models over HTTP (API docs at /docs). Every setting also reads LNSERVE_<NAME>."""
    from lnserve.app.log_setup import configure_logging
    from lnserve.app.server import serve_app
    from lnserve.app.settings import Settings

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "models": models or None,
            "default_model": default_model,
            "host": host,
            "port": port,
            "backend": backend,
            "galleries_dir": galleries_dir,
        }.items()
        if v is not None
    }
    settings = Settings(**overrides)
    configure_logging(settings.log_level)
    serve_app(settings)  # a bad model directory or a taken port fails first, as a one-line CLI error


def register(app: typer.Typer) -> None:
    app.command()(serve)
