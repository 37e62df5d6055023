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
    import uvicorn

    from lnserve.app.log_setup import configure_logging
    from lnserve.app.main import create_app
    from lnserve.app.registry import resolve_model_dirs
    from lnserve.app.settings import load_settings

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
    settings = load_settings(overrides)  # a bad value: one line naming the setting, exit 2
    configure_logging(settings.log_level)
    resolve_model_dirs(settings)  # a bad directory or name fails here, as a one-line CLI error
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=settings.drain_timeout_s,
        server_header=False,
    )


def register(app: typer.Typer) -> None:
    app.command()(serve)
