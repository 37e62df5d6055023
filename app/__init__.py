"""lnserve application layer: the runtime (no FastAPI), the CLI and the HTTP service."""

__version__ = "0.1.0"
