"""``GET /metrics``: Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from ..deps import RenderMetricsDep

PUBLIC = True  # scraped without the API key
router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(render: RenderMetricsDep) -> Response:
    """Request counts and latency by route and status, queue wait, batch sizes, tokens, queue depth."""
    # in a thread: on Ray, rendering gathers every replica's samples (lnserve.app.scale.metrics)
    body = await run_in_threadpool(render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
