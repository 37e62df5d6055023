"""onnxruntime backend: CUDA when present (and asked for), CPU otherwise, always reporting what it got.

Graphs come from the artifact's ``onnx/`` export when present; otherwise they are built in memory from the
weights (same builder), so ``--backend onnx`` works on any artifact. Graphs built in memory on the CPU
provider at fp32 use the fused step for lngru / rlngru parts (``runtime.fused_op``: one custom op for the
norms and gates) when its library was built at install and passes its self-check; ``graph`` says which, and
``fused_forms`` which op each part runs (small fp32 cells: the whole recurrence as one op).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...converters.artifact import Artifact
from ...converters.families import family_of
from .cpu_features import cpu_flags, int8_scheme_for
from .errors import EncodeInputError, OnnxModelError, ProviderUnavailableError
from .fused_op import FUSED_CELLS, LN_OP, LN_SEQUENCE_OP, RMS_OP, RMS_SEQUENCE_OP, SEQUENCE_MAX_D
from .fused_op.loader import fused_op_status, register
from .onnx_export import DEFAULT_FORM, EXPORT_FORMAT, build_fp16_graphs, build_graphs
from .onnx_graph.gemms import SCHEMES
from .precisions import EXACT, backend_for

log = logging.getLogger("lnserve.runtime")

CUDA, CPU, TENSORRT = "CUDAExecutionProvider", "CPUExecutionProvider", "TensorrtExecutionProvider"


def cuda_device_present() -> bool:
    """Cheap check before asking ORT for CUDA, which logs loud errors on machines without a GPU."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def default_providers() -> list[str]:
    available = ort.get_available_providers()
    if CUDA in available and cuda_device_present():
        return [CUDA, CPU]
    return [CPU]


def session_options(threads: int | None) -> ort.SessionOptions:
    """Threads sized to the machine, and no spinning: idle ORT workers must not starve the event loop.

    Not within runs either (``session.force_spinning_stop`` would allow that and stop at each run's end):
    on the shared 2-core VM, a pool spinning inside runs made B=32 1.3-1.5x slower whenever another process
    wanted the cores (issue 24; encode_throughput ``--spin`` / ``--no-spin`` measure both).
    """
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or min(os.cpu_count() or 1, 8)
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    return so


ort.set_default_logger_severity(3)
SEQUENCE_OPS, STEP_OPS = {LN_SEQUENCE_OP, RMS_SEQUENCE_OP}, {LN_OP, RMS_OP}


class OnnxBackend:
    """One ORT session per graph (recurrent parts and the image projection)."""

    name = "onnx"

    def __init__(
        self,
        artifact: Artifact,
        *,
        providers: Sequence[str] | None = None,
        strict: bool = False,
        threads: int | None = None,
        form: str | None = None,
        precision: str = "fp32",
        fused_op: bool = True,
        fused_library: Path | None = None,
        int8_scheme: str | None = None,
        fused_sequence_max_dim: int = SEQUENCE_MAX_D,
    ) -> None:
        if backend_for(precision, "onnx") != "onnx":
            raise EncodeInputError(f"precision {precision} runs on the torch backend, not onnx")
        self.precision = precision
        if int8_scheme is not None and int8_scheme not in SCHEMES:
            raise EncodeInputError(
                f"unknown int8 scheme {int8_scheme!r}; expected one of {', '.join(SCHEMES)}"
            )
        self.int8_scheme = (int8_scheme or int8_scheme_for(cpu_flags())) if precision == "int8" else None
        if self.int8_scheme:
            log.info("%s: int8 activations: %s scheme", artifact.name, self.int8_scheme)
        self.requested = list(providers) if providers else default_providers()
        self.strict = strict
        if precision == "int8" and self.requested[0] != CPU:
            self._int8_on_cpu(explicit=bool(providers))
        if self.requested[0] in (CUDA, TENSORRT) and not cuda_device_present():
            self._fallback(["no NVIDIA device visible"])
            self.requested = [p for p in self.requested if p not in (CUDA, TENSORRT)] or [CPU]
        options = session_options(threads)
        self.graph, self.graph_note = "plain", ""  # "fused": the lngru / rlngru step as one custom op
        self.fused_forms: dict[str, str] = {}  # part -> "sequence" or "step", for the fused graph
        self.fused_sequence_max_dim = fused_sequence_max_dim
        if fused_op:
            self._try_fused(artifact, form, options, fused_library)
        else:
            self.graph_note = "fused step turned off (LNSERVE_FUSED_OP=0)"
        self.sessions: dict[str, ort.InferenceSession] = {}
        self.providers: list[str] = []
        for part, source in self._graph_sources(artifact, form).items():
            self.sessions[part] = self._session(source, options, part)
            if not self.providers:
                self.providers = list(self.sessions[part].get_providers())
                if self.requested[0] not in self.providers:
                    self._fallback(self.providers)

    def _int8_on_cpu(self, *, explicit: bool) -> None:
        """int8 is a CPU profile (MLAS u8s8 kernels): asked for with a GPU provider named, it is an error;
        with the default providers (CUDA first on a GPU host), it runs on the CPU provider, as logged."""
        if explicit:
            raise ProviderUnavailableError(
                f"precision int8 runs on {CPU}, not {self.requested[0]}; use fp16 on a GPU"
            )
        log.info("precision int8 runs on %s", CPU)
        self.requested = [CPU]

    def _fallback(self, got: list[str]) -> None:
        """Strict mode fails at startup instead of silently running on the CPU."""
        if self.strict:
            raise ProviderUnavailableError(
                f"strict mode: asked for {self.requested[0]} but got {', '.join(got)} "
                "(is a GPU visible, and are CUDA 13 and cuDNN 9 installed?)"
            )
        log.warning("asked for %s, falling back (%s)", self.requested[0], ", ".join(got))

    def _try_fused(
        self, artifact: Artifact, form: str | None, options: ort.SessionOptions, library: Path | None
    ) -> None:
        """Use the fused step where it applies and works; otherwise say why the plain graph runs."""
        if not set(_part_cells(artifact)) & set(FUSED_CELLS):
            return  # nothing to fuse (gru, LSTM cells): not worth a note
        why = ""
        exported = artifact.manifest.get("onnx")
        if self.requested[0] != CPU or self.precision == "fp16" or form not in (None, DEFAULT_FORM):
            why = f"fused step is for the CPU provider, fp32 or int8, and the {DEFAULT_FORM} form"
        elif exported and form in (None, exported.get("form")) and self.precision == EXACT:
            why = "the artifact's ONNX export runs as exported (standard ops, no fused step)"
        elif not (status := fused_op_status(library)).available:
            why = f"fused step unavailable: {status.reason}"
            log.warning("%s: onnx graph: plain (%s)", artifact.name, why)
        else:
            try:
                register(options, status.library)
            except Exception as exc:  # ORT raises its own pybind exception types
                why = f"fused step unavailable: {str(exc).splitlines()[0]}"
                log.warning("%s: onnx graph: plain (%s)", artifact.name, why)
            else:
                self.graph = "fused"
                log.info("%s: onnx graph: fused LN-GRU step (%s)", artifact.name, status.library.name)
        self.graph_note = why

    def _graph_sources(self, artifact: Artifact, form: str | None) -> dict[str, bytes | str]:
        if self.precision == "fp16":  # always built from the weights: the export is the fp32 profile
            graphs = build_fp16_graphs(artifact, form=form or DEFAULT_FORM, check=False)  # ORT validates
            return {part: model.SerializeToString() for part, model in graphs.items()}
        exported = artifact.manifest.get("onnx")
        if exported and form in (None, exported.get("form")) and self.precision == EXACT:
            if exported.get("export_format", 0) > EXPORT_FORMAT:
                raise OnnxModelError(
                    f"{artifact.path}: ONNX export format {exported['export_format']} is newer than this "
                    f"lnserve reads ({EXPORT_FORMAT}); re-export with `lnserve export` or upgrade"
                )
            sources: dict[str, bytes | str] = {}
            for part, entry in exported["graphs"].items():
                path = artifact.path / entry["file"]
                if not path.is_file():
                    raise OnnxModelError(
                        f"{path}: exported ONNX graph is missing; run `lnserve export` again"
                    )
                sources[part] = str(path)
            return sources
        fused = self.graph == "fused"  # only ever in memory: exports stay standard ONNX
        graphs = build_graphs(  # int8: built from the weights too (exports are the exact profile)
            artifact,
            form=form or DEFAULT_FORM,
            check=False,
            fused=fused,
            precision=self.precision,
            int8_scheme=self.int8_scheme or "full",
            sequence_max_dim=self.fused_sequence_max_dim,
        )  # check=False: ORT validates
        forms = {part: _fused_form(model.graph) for part, model in graphs.items()}
        self.fused_forms = {part: form for part, form in forms.items() if form}
        if self.fused_forms:
            listed = ", ".join(f"{part}: {form} op" for part, form in self.fused_forms.items())
            log.info("%s: fused graph parts: %s", artifact.name, listed)
        return {part: model.SerializeToString() for part, model in graphs.items()}

    def _session(self, source: bytes | str, options: ort.SessionOptions, part: str) -> ort.InferenceSession:
        try:
            return ort.InferenceSession(source, options, providers=self.requested)
        except Exception as exc:  # ORT raises its own pybind exception types
            raise OnnxModelError(
                f"cannot load the ONNX graph for {part!r}: {str(exc).splitlines()[0]}"
            ) from None

    def recurrent(self, part: str, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """x (T, B, F) float32, lengths (B,) int64 -> state after each row's last valid step (B, d)."""
        feeds: dict[str, Any] = {
            "x": np.ascontiguousarray(x, dtype=np.float32),
            "lengths": np.ascontiguousarray(lengths, dtype=np.int64),
        }
        return self.sessions[part].run(["h"], feeds)[0]

    def image_projection(self, features: np.ndarray) -> np.ndarray:
        feeds = {"features": np.ascontiguousarray(features, dtype=np.float32)}
        return self.sessions["image"].run(["projected"], feeds)[0]


def _fused_form(graph: onnx.GraphProto) -> str | None:
    """Which fused op a built graph runs: ``sequence`` (one node), ``step`` (in its Scan's body), or None."""
    ops = {node.op_type for node in graph.node}
    if ops & SEQUENCE_OPS:
        return "sequence"
    graph_type = onnx.AttributeProto.GRAPH
    bodies = [attr.g for node in graph.node for attr in node.attribute if attr.type == graph_type]
    return "step" if any({n.op_type for n in body.node} & STEP_OPS for body in bodies) else None


def _part_cells(artifact: Artifact) -> list[str]:
    """The cell type of each recurrent part, from the manifest (no weights read)."""
    return family_of(artifact.manifest).cells(artifact.manifest)
