"""``GET /metrics``: Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

PUBLIC = True  # scraped without the API key
router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request) -> Response:
    """Request counts and latency by route and status, queue wait, batch sizes, tokens, queue depth."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
