"""onnxruntime sessions as lnserve makes them (``session_options``): intra-op workers never spin, so an idle
model takes no CPU from the event loop (issue 24 measured spinning within runs too: not robust under load)."""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from lnserve.app.runtime.onnx_backend import session_options

IDLE_S = 0.3


def _matmul_session(options: ort.SessionOptions) -> tuple[ort.InferenceSession, dict[str, np.ndarray]]:
    """A MatMul big enough for MLAS to split over the intra-op pool (both operands inputs: no prepacking)."""
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    vi = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [256, 256]) for x in "abc"]
    model = helper.make_model(
        helper.make_graph([node], "mm", vi[:2], vi[2:]), opset_imports=[helper.make_opsetid("", 18)]
    )
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    return sess, {"a": a, "b": a}


def _cpu_while_idle(options: ort.SessionOptions) -> float:
    """Process CPU seconds spent during IDLE_S of sleep right after a few runs: the workers' spinning."""
    sess, feeds = _matmul_session(options)
    for _ in range(20):
        sess.run(None, feeds)
    start = time.process_time()
    time.sleep(IDLE_S)
    return time.process_time() - start


def test_service_sessions_never_spin() -> None:
    options = session_options(2)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"


def test_idle_workers_take_no_cpu_after_a_run() -> None:
    """Measured on the 2-core Xeon: 0.1-0.2 ms with the service's options (0.1-0.4 ms spinning within runs
    only, force_spinning_stop=1), 23-28 ms for a pool left spinning after runs (ORT's default)."""
    assert _cpu_while_idle(session_options(2)) < 0.01
