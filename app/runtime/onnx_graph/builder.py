"""Writing ONNX graphs op by op: fresh value names, weights stored once, value infos and the model wrapper.

The graphs are written with ``onnx.helper`` instead of being traced from PyTorch, because tracing unrolls the
time loop at the example length (spec §11) and the graph form should be an explicit choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

MIN_OPSET = 17  # the first opset with LayerNormalization


@dataclass
class GraphBuilder:
    """Node list of one (sub)graph plus the initializer table shared with the main graph.

    Loop/Scan bodies put their constants into the main graph's initializers, so every weight exists once and
    the body reads it from the outer scope.
    """

    prefix: str = ""
    inits: dict[str, onnx.TensorProto] = field(default_factory=dict)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    counter: list[int] = field(default_factory=lambda: [0])

    def fresh(self, base: str) -> str:
        """Return a graph-unique value name (the counter is shared between the main graph and its bodies)."""
        self.counter[0] += 1
        return f"{self.prefix}{base}_{self.counter[0]}"

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        """Append one node and return its (first) output's name."""
        return self.op_multi(op_type, inputs, n_out, **attrs)[0]

    def op_multi(self, op_type: str, inputs: list[str], n_out: int, **attrs: Any) -> list[str]:
        """Append one node and return all its output names."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        name = self.fresh("node_" + op_type)
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def const(self, value: np.ndarray, base: str) -> str:
        """Register an initializer in the main graph and return its name (``base`` unless taken)."""
        name = base if base not in self.inits else self.fresh(base)
        self.inits[name] = numpy_helper.from_array(np.array(value, order="C"), name)
        return name

    def cached(self, name: str, value: np.ndarray) -> str:
        """Register a small shared constant under a fixed name the first time it is asked for."""
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(np.array(value, order="C"), name)
        return name

    def sub(self, prefix: str) -> GraphBuilder:
        """A body graph sharing this graph's initializer table and name counter."""
        return GraphBuilder(prefix=prefix, inits=self.inits, counter=self.counter)


def value_info(name: str, elem: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def need(weights: Mapping[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Fetch one weight and fail loudly on a missing key or a wrong shape (spec §10 item 12)."""
    if name not in weights:
        raise KeyError(f"missing weight {name!r}")
    arr = np.asarray(weights[name])
    if arr.shape != shape:
        raise ValueError(f"weight {name!r} has shape {arr.shape}, expected {shape}")
    return arr.astype(np.float32, copy=False)


def split_equal(g: GraphBuilder, z: str, n: int, opset: int) -> list[str]:
    """Split the last axis into ``n`` equal parts (opset 18 names the count, older opsets infer it)."""
    if opset >= 18:
        return g.op_multi("Split", [z], n, axis=-1, num_outputs=n)
    return g.op_multi("Split", [z], n, axis=-1)


def make_model(
    graph: onnx.GraphProto, opset: int, *, check: bool = True, domains: Mapping[str, int] | None = None
) -> onnx.ModelProto:
    """Wrap a graph with the lowest IR version the opset needs (ORT refuses IRs newer than it knows).

    ``check=False`` skips ``onnx.checker`` for a graph handed straight to onnxruntime: ORT validates what it
    loads, and the checker re-serialises every weight (~0.2 s of CPU per start at 620 -> 2400).
    ``domains``: custom-op domains and their versions (the fused serving graphs; never exported)."""
    opsets = [helper.make_opsetid("", opset)]
    custom = [helper.make_opsetid(name, version) for name, version in (domains or {}).items()]
    model = helper.make_model(
        graph,
        opset_imports=opsets + custom,
        producer_name="lnserve.app.runtime.onnx_graph",
        ir_version=helper.find_min_ir_version_for(opsets),
    )
    if check:
        onnx.checker.check_model(model)
    return model
