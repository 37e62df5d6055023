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
