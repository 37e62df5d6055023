"""The ONNX encoder graphs the runtime serves, built op by op from an artifact's weights (spec §2-§4, §11)."""

from lnserve.app.runtime.onnx_graph.recurrent import build_image_encoder_graph, build_recurrent_encoder_graph

__all__ = ["build_image_encoder_graph", "build_recurrent_encoder_graph"]
