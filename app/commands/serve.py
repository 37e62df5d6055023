"""``lnserve serve``: the HTTP service under uvicorn. Flags override ``LNSERVE_*`` environment settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lnserve.errors import UserInputError
from lnserve.extras import require, require_installed

from ..runtime.precisions import HELP as PRECISION_HELP

if TYPE_CHECKING:
    from ..serving.registry import ModelDirs
    from ..settings import Settings


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
    precision: Annotated[
        str | None, typer.Option("--precision", help=f"Precision profile: {PRECISION_HELP} (default fp32).")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Inference backend: onnx or torch.")
    ] = None,
    galleries_dir: Annotated[
        Path | None,
        typer.Option("--galleries-dir", help="Gallery root (default ~/.local/share/lnserve/galleries)."),
    ] = None,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            # rich would read [ray] as markup and print 'lnserve': escaped
            help="Serve on Ray Serve (needs: pip install 'lnserve\\[ray]').",
        ),
    ] = False,
    replicas: Annotated[
        int | None, typer.Option("--replicas", help="--ray: encoding replicas (default 1).")
    ] = None,
    min_replicas: Annotated[
        int | None, typer.Option("--min-replicas", help="--ray: autoscaling lower bound.")
    ] = None,
    max_replicas: Annotated[
        int | None, typer.Option("--max-replicas", help="--ray: autoscaling upper bound.")
    ] = None,
    shards: Annotated[int, typer.Option("--shards", help="--ray: gallery shards.")] = 1,
    address: Annotated[
        str | None,
        typer.Option("--address", help="--ray: join this cluster (HEAD:6379) instead of a local instance."),
    ] = None,
    replica_cpus: Annotated[
        float, typer.Option("--replica-cpus", help="--ray: CPUs Ray reserves per replica.")
    ] = 1.0,
    shard_cpus: Annotated[
        float, typer.Option("--shard-cpus", help="--ray: CPUs Ray reserves per shard.")
    ] = 1.0,
    ingress: Annotated[
        str | None,
        typer.Option(
            "--ingress",
            help="--ray: proxy (Serve's HTTP proxy, the default) or direct (each replica serves the port "
            "itself: faster, see docs/scaling-out.md).",
        ),
    ] = None,
) -> None:
    """Serve models over HTTP (API docs at /docs). Every setting also reads LNSERVE_<NAME>."""
    from ..http.server import serve_app
    from ..log_setup import configure_logging
    from ..serving.registry import demo_if_empty, resolve_model_dirs
    from ..settings import load_settings

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "models": models or None,
            "default_model": default_model,
            "host": host,
            "port": port,
            "backend": backend,
            "precision": precision,
            "galleries_dir": galleries_dir,
        }.items()
        if v is not None
    }
    settings = load_settings(overrides)  # a bad value: one line naming the setting, exit 2
    configure_logging(settings.log_level)
    settings = demo_if_empty(settings)  # an empty /models volume: the demo, with a warning
    model_dirs = resolve_model_dirs(settings)  # a bad directory or name fails here, as a one-line CLI error
    _require_torch_where_needed(settings, model_dirs)
    ray_flags = (replicas, min_replicas, max_replicas, address, ingress)
    if not ray and (any(f is not None for f in ray_flags) or shards != 1):
        raise UserInputError(
            "--replicas, --min-replicas, --max-replicas, --shards, --address and --ingress need --ray"
        )
    if ray:
        _serve_on_ray(
            settings, replicas, min_replicas, max_replicas, shards, address, replica_cpus, shard_cpus,
            ingress or "proxy",
        )  # fmt: skip
        return
    serve_app(settings, model_dirs)  # a damaged model file or a taken port fails first: one CLI line


def _require_torch_where_needed(settings: Settings, model_dirs: ModelDirs) -> None:
    """``--backend torch``, or a model only torch runs, without torch installed: one line naming the extra,
    before any model loads or the port is bound (not a failed start-up after both). So is a precision the
    backend cannot run (``--precision int8 --backend torch``)."""
    from ...converters.artifact import Artifact
    from ..runtime.engine import needs_torch
    from ..runtime.precisions import backend_for

    runs_on = backend_for(settings.precision, settings.backend)  # raises for int8 / fp16 on torch
    if settings.backend == "torch":
        require("torch", "torch", "--backend torch")
        return
    if runs_on == "torch":
        require("torch", "torch", f"--precision {settings.precision}")
        return
    if settings.strict_provider:  # no fallback to torch: the model's load refuses it, with its own code
        return
    for name, path, manifest in model_dirs:
        try:
            reason = needs_torch(Artifact(path, manifest))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue  # a malformed manifest: the model's load reports it, with its own code
        if reason:
            require("torch", "torch", f"model {name}: {reason}; its torch backend")


def _serve_on_ray(settings: Settings, *flags: Any) -> None:
    # not imported here: Ray reads RAY_DEDUP_LOGS and others when imported, and serve_on_ray sets them first
    # (imported before, it merged the replicas' access-log lines into "[repeated 2x across cluster]")
    require_installed("ray", "ray", "--ray")
    from ..scale.launch import RayOptions, serve_on_ray

    replicas, min_replicas, max_replicas, shards, address, replica_cpus, shard_cpus, ingress = flags
    opts = RayOptions(
        replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas, shards=shards,
        address=address, replica_cpus=replica_cpus, shard_cpus=shard_cpus, ingress=ingress,
    )  # fmt: skip
    opts.check()
    serve_on_ray(settings, opts)


def register(app: typer.Typer) -> None:
    app.command()(serve)
