"""The served graph is reported: ``GET /models`` says ``fused`` for the demo LN-GRU where the custom-op
library was built, and ``plain`` when ``LNSERVE_FUSED_OP=0`` turns it off; the log names the fused op each
part runs, the whole-sequence op for the demo's small cell unless ``LNSERVE_FUSED_SEQUENCE_MAX_DIM=0`` (real
servers on loopback)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lnserve.app.runtime.fused_op.loader import fused_op_status
from tests.e2e.server import start_server


@pytest.mark.parametrize(
    ("env", "graph", "form"),
    [
        ({}, "fused", "sequence"),
        ({"LNSERVE_FUSED_SEQUENCE_MAX_DIM": "0"}, "fused", "step"),
        ({"LNSERVE_FUSED_OP": "0"}, "plain", None),
    ],
)
def test_models_report_the_served_graph(
    tmp_path: Path, env: dict[str, str], graph: str, form: str | None
) -> None:
    if graph == "fused" and not fused_op_status().library.is_file():
        pytest.skip("fused op not built here (no C++ compiler)")
    server = start_server(tmp_path, env=env)
    try:
        (model,) = httpx.get(server.url + "/models", timeout=10).json()["models"]
        assert model["cells"] == {"sentence": "lngru"}
        assert model["graph"] == graph
        if graph == "plain":
            assert "onnx graph: plain" not in server.log()  # turned off on purpose: no warning
        else:
            assert f"fused graph parts: sentence: {form} op" in server.log()
    finally:
        server.stop()
