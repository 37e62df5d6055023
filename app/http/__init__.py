"""The HTTP layer (FastAPI): app factory, server, lifecycle, middleware, body parsing, dependencies, the
error-status table, metrics, routes and schemas. Handlers parse, call serving, shape."""
