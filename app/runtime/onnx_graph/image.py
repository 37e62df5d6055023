"""The order-embeddings image encoder graph (spec §6.2): one linear layer, no normalisation."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .builder import make_model, value_info


def build_image_encoder_graph(weight: np.ndarray, bias: np.ndarray, *, opset: int = 18) -> onnx.ModelProto:
    """``projected = features @ weight.T + bias``; ``weight`` is PyTorch (d, dim_image), used as given by a
    Gemm with transB."""
    weight = np.asarray(weight, dtype=np.float32)
    bias = np.asarray(bias, dtype=np.float32)
    if weight.ndim != 2 or bias.shape != (weight.shape[0],):
        raise ValueError(f"weight {weight.shape} / bias {bias.shape} are not a (d, dim_image) linear layer")
    d, dim_image = weight.shape
    inits = [numpy_helper.from_array(weight, "ff_image_W"), numpy_helper.from_array(bias, "ff_image_b")]
    node = helper.make_node("Gemm", ["features", "ff_image_W", "ff_image_b"], ["projected"], transB=1)
    graph = helper.make_graph(
        [node],
        "image_encoder",
        [value_info("features", TensorProto.FLOAT, ["B", dim_image])],
        [value_info("projected", TensorProto.FLOAT, ["B", d])],
        inits,
    )
    return make_model(graph, opset)
