"""``lnserve export``: write the ONNX graphs of an artifact into it and record them in the manifest.

Word tables stay outside the graphs (a protobuf cannot exceed 2 GB): the runtime gathers word vectors from
the memory-mapped tables and feeds ``x (T, B, n_in)``. Each recurrent part (``sentence`` for
order-embeddings, ``uni`` / ``bi_fwd`` / ``bi_bwd`` for skip-thoughts) gets its own graph; order-embeddings
also get ``image``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ...converters.artifact import SKIP_PART_MODULES, Artifact, add_files, read_artifact
from ...converters.families import family_of
from ...converters.int8_calibration import read_state_peaks
from .errors import OnnxModelError
from .fused_op import FUSED_CELLS, SEQUENCE_MAX_D, uses_sequence_op
from .onnx_graph import build_image_encoder_graph, build_recurrent_encoder_graph
from .onnx_graph.recurrent import encoder_dims

EXPORT_FORMAT = 1  # bump when the graph I/O contract changes; the runtime refuses newer ones
DEFAULT_OPSET = 18
FP16_OPSET = 23
DEFAULT_FORM = "scan"  # measured: benchmarks/onnx_graph_forms.py (README, "ONNX graph form")
ONNX_DIR = "onnx"


def recurrent_parts(artifact: Artifact) -> dict[str, tuple[str, dict[str, np.ndarray]]]:
    """part name -> (cell type, cell weights in module naming)."""
    tensors = artifact.tensors()
    m = artifact.manifest
    if not family_of(m).stacked:
        prefixes = {"sentence": ("sentence.rnn.cell.", m["cell"])}
    else:
        prefixes = {}
        for kind, info in m["parts"].items():
            for part in SKIP_PART_MODULES[kind].values():
                prefixes[part] = (f"{part}.cell.", info["cell"])
    return {
        part: (cell, {k.removeprefix(pre): v for k, v in tensors.items() if k.startswith(pre)})
        for part, (pre, cell) in prefixes.items()
    }


def build_graphs(
    artifact: Artifact,
    *,
    opset: int = DEFAULT_OPSET,
    form: str = DEFAULT_FORM,
    check: bool = True,
    fused: bool = False,
    precision: str = "fp32",
    int8_scheme: str = "full",
    calibrated: bool = True,
    sequence_max_dim: int = SEQUENCE_MAX_D,
) -> dict[str, onnx.ModelProto]:
    """Every graph of the artifact; ``check=False`` skips ``onnx.checker`` for graphs that go straight to
    onnxruntime (see ``build_recurrent_encoder_graph``). ``fused``: lngru / rlngru parts use the fused
    custom ops, the whole-sequence op for fp32 cells in the scan form whose state is at most
    ``sequence_max_dim`` wide; in-memory serving graphs only: ``export_onnx`` never asks for it.
    ``precision``: fp32 or int8 recurrent products (``onnx_graph.gemms``, activations by ``int8_scheme``);
    the image projection stays float32 in both. int8 uses the artifact's calibration if it has one
    (``calibrated=False``: never, for comparisons)."""
    partial = artifact.partial_rms
    if partial != 1.0:
        raise OnnxModelError(
            f"{artifact.path}: partial RMSNorm (p={partial}) is not in the ONNX graph builder; "
            "serve this model with the torch backend"
        )
    parts = recurrent_parts(artifact)
    peaks = None
    if precision == "int8" and calibrated:
        peaks = read_state_peaks(artifact, {part: encoder_dims(w)[1] for part, (_, w) in parts.items()})
    graphs = {}
    for part, (cell, weights) in parts.items():
        part_form, part_fused = _form_for(cell, form), fused and cell in FUSED_CELLS
        graphs[part] = build_recurrent_encoder_graph(
            cell,
            weights,
            opset=opset,
            form=part_form,
            check=check,
            fused=part_fused,
            sequence_op=part_fused
            and part_form == "scan"
            and uses_sequence_op(encoder_dims(weights)[1], precision, sequence_max_dim),
            precision=precision,
            int8_scheme=int8_scheme,
            state_peaks=None if peaks is None else peaks[part],
        )
    if not family_of(artifact.manifest).text_only:
        t = artifact.tensors()
        graphs["image"] = build_image_encoder_graph(t["image.proj.weight"], t["image.proj.bias"], opset=opset)
    return graphs


def build_fp16_graphs(
    artifact: Artifact, *, form: str = DEFAULT_FORM, check: bool = True
) -> dict[str, onnx.ModelProto]:
    """The graphs with float16 weights and arithmetic, for GPUs; inputs and outputs stay float32.

    Built at opset 23 so that RMS cells use ``RMSNormalization``: like ``LayerNormalization`` its default
    ``stash_type=1`` computes the norm statistics in float32, which fp16 sums of squares would not.
    A separate precision profile: it does not meet the 1e-5 fidelity contract (drift: README).
    """
    from onnxconverter_common import float16

    graphs = build_graphs(artifact, opset=FP16_OPSET, form=form, check=check)
    with warnings.catch_warnings():  # the converter warns about every value it rounds
        warnings.simplefilter("ignore")
        return {part: float16.convert_float_to_float16(m, keep_io_types=True) for part, m in graphs.items()}


def _form_for(cell: str, form: str) -> str:
    return "loop" if form == "native" and cell != "gru" else form


def _io(model: onnx.ModelProto) -> dict[str, Any]:
    def desc(values: Any) -> dict[str, list[int | str]]:
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}

    return {"inputs": desc(model.graph.input), "outputs": desc(model.graph.output)}


def export_onnx(path: Path, *, opset: int = DEFAULT_OPSET, form: str = DEFAULT_FORM) -> dict[str, Any]:
    """Write ``onnx/<part>.onnx`` for every part and update the manifest; returns the new manifest."""
    artifact = read_artifact(path)
    graphs = build_graphs(artifact, opset=opset, form=form)
    entries = {part: {"file": f"{ONNX_DIR}/{part}.onnx", **_io(model)} for part, model in graphs.items()}
    files = ((entries[part]["file"], model.SerializeToString()) for part, model in graphs.items())
    section = {"export_format": EXPORT_FORMAT, "opset": opset, "form": form, "graphs": entries}
    return add_files(artifact.path, artifact.manifest, files, onnx=section)
