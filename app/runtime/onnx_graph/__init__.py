"""The ONNX encoder graphs the runtime serves, built op by op from an artifact's weights (spec §2-§4, §11).

``recurrent`` assembles a sentence encoder from a cell (``gru``, ``lstm``) in named steps; ``norms`` holds the
LayerNorm/RMSNorm ops, ``builder`` the op-by-op graph writer, ``image`` the image projection.
"""

from .image import build_image_encoder_graph
from .recurrent import GRAPH_FORMS, build_recurrent_encoder_graph

__all__ = ["GRAPH_FORMS", "build_image_encoder_graph", "build_recurrent_encoder_graph"]
