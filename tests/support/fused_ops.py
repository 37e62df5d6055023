"""Shared by the fused ops' tests: real onnxruntime sessions with or without the custom-op library, a
one-node model of an ``ai.lnserve`` op, and the fixture captions through an engine."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.fused_op import DOMAIN
from lnserve.app.runtime.fused_op.loader import fused_op_status, random_cell_weights, register
from tests.conftest import inputs


def session(model: onnx.ModelProto, *, custom: bool, threads: int | None = None) -> ort.InferenceSession:
    """A CPU session; ``custom``: with the built library registered."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    if custom:
        register(options, fused_op_status().library)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def one_node_model(
    node: onnx.NodeProto, graph_inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto]
) -> onnx.ModelProto:
    """``node`` alone, its output ``y`` of any shape: to feed an op what the graph builder never would."""
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "one_node", graph_inputs, [y], inits)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)], ir_version=8
    )


def padded_batch(
    rng: np.random.Generator, steps: int, batch: int, n_in: int
) -> tuple[np.ndarray, np.ndarray]:
    """Random inputs x (steps, batch, n_in) and lengths from 1 to steps, the first row full length: most
    rows padded."""
    x = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    lengths = rng.integers(1, steps + 1, batch).astype(np.int64)
    lengths[0] = steps
    return x, lengths


def saturating_case(cell: str) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(weights, x, lengths) that saturate the gates (biases x400, inputs x50), with a NaN input in row 1 at
    step 2: that row must come out NaN and rows 0, 2 and 3 untouched."""
    rng = np.random.default_rng(3)
    weights = random_cell_weights(rng, cell, 8, 16)
    weights["bias_ih"] = weights["bias_ih"] * 400.0
    x = (rng.standard_normal((5, 4, 8)) * 50.0).astype(np.float32)
    x[2, 1, 3] = np.nan
    return weights, x, np.array([5, 5, 3, 1], np.int64)


def encode_captions(engine: Engine) -> np.ndarray:
    """The order-embedding fixtures' captions, in batches of 5 (a remainder batch included)."""
    return engine.encode_sentences(inputs()["order_embedding"]["captions"], pretokenized=True, batch_size=5)
