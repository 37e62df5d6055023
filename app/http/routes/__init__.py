"""HTTP routers. ``create_app`` includes ``app.routes.<m>.router`` for each name below, in order.

A module that sets ``PUBLIC = True`` is served without the API key (health, metrics); every other router
requires it when one is configured. New routers are added by appending here.
"""

ROUTER_MODULES: tuple[str, ...] = (
    "encode",
    "embeddings",
    "models",
    "health",
    "metrics",
    "galleries",
    "retrieve",
    "tokenize",
    "score",
    "reload",
    "tei",
    "front",
)

# the hot routes (POST), answered below FastAPI's per-request machinery when their body allows
# (``lnserve.app.http.fast_routes``); each handler takes only its body model and the request
FAST_ROUTES: frozenset[str] = frozenset({"/encode", "/v1/embeddings", "/embed"})
