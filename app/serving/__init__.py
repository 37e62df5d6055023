"""The serving core, free of HTTP: model registry, micro-batching, timing and deadlines, the service's errors
and the gallery / retrieval flow. Never imports FastAPI or ``app.http``."""
