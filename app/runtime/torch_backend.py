"""Reference backend: the PyTorch modules of ``models``. The only runtime module that imports torch.

It also runs ``bf16``: the cells' GEMM weights in bfloat16, for which PyTorch's oneDNN picks the CPU's
AVX-512 BF16 or AMX kernels (onnxruntime has no bf16 GEMM on CPU); everything else stays float32.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from ...converters.artifact import Artifact
from ...converters.errors import ManifestMismatchError
from ...converters.families import family_of
from ...models.cells import GRUFamilyCell, LSTMFamilyCell
from ...models.encoders import OrderEmbedding, OrderEmbeddingConfig, SkipThoughts, SkipThoughtsConfig
from ...models.recurrence import Recurrence
from .cpu_features import bf16_unsupported, cpu_flags
from .errors import EncodeInputError, ProviderUnavailableError

PRECISIONS = ("fp32", "bf16")


def build_module(artifact: Artifact) -> torch.nn.Module:
    """Instantiate the artifact's module from its manifest and load its weights strictly."""
    m = artifact.manifest
    dims = m["dims"]
    module: torch.nn.Module
    if not family_of(m).stacked:
        cfg = OrderEmbeddingConfig(
            cell=m["cell"],
            n_words=dims["n_words"],
            dim_word=dims["dim_word"],
            dim=dims["dim"],
            dim_image=dims["dim_image"],
            use_abs=bool(m["options"]["abs"]),
            partial_rms=artifact.partial_rms,
        )
        module = OrderEmbedding(cfg)
    else:
        parts = m["parts"]
        uni, bi = parts.get("uni"), parts.get("bi")
        module = SkipThoughts(
            SkipThoughtsConfig(
                dim_word=dims["dim_word"],
                uni_cell=uni and uni["cell"],
                uni_dim=uni and uni["dim"],
                bi_cell=bi and bi["cell"],
                bi_dim=bi and bi["dim"],
            )
        )
    state = {k: torch.from_numpy(np.array(v)) for k, v in artifact.tensors().items()}
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0:3]
        raise ManifestMismatchError(
            f"{artifact.path}: weights do not match the manifest: {' '.join(first)}"
        ) from None
    return module.eval()


def gemm_weights_to(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Hold every recurrent cell's ``weight_ih`` / ``weight_hh`` in ``dtype``; norm gains and biases,
    the cells' biases and the image projection keep theirs (the cells cast around the GEMMs only)."""
    for cell in module.modules():
        if isinstance(cell, GRUFamilyCell | LSTMFamilyCell):
            for name in ("weight_ih", "weight_hh"):
                weight = getattr(cell, name)
                setattr(cell, name, torch.nn.Parameter(weight.detach().to(dtype), requires_grad=False))


def torch_bf16_unsupported() -> str | None:
    """Why this torch cannot run fast bf16 matmuls (one line), or None: they go through oneDNN, and without
    it torch falls back to a reference kernel ~14x slower than with it."""
    if torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled:  # type: ignore[no-untyped-call]
        return None
    return "bf16 needs PyTorch's oneDNN, which this torch lacks or has disabled; use --precision fp32 or int8"


class TorchBackend:
    """Runs the recurrences and the image projection with the reference PyTorch modules.

    ``precision="bf16"`` needs a CPU with AVX-512 BF16 or AMX (``flags``: the CPU flags to judge, this
    machine's by default) and torch's oneDNN; elsewhere it raises ``ProviderUnavailableError`` rather than
    run emulated bf16, which is slower than fp32 (a 128x1024 @ 1024x3072 matmul on an AMD EPYC Zen 4, 2
    threads: fp32 5.1 ms, bf16 1.9 ms; with oneDNN held to AVX-512 VNNI 11.4 ms, to AVX2 18.5 ms, without
    oneDNN 28 ms).
    """

    name = "torch"

    def __init__(
        self,
        artifact: Artifact,
        *,
        threads: int | None = None,
        precision: str = "fp32",
        flags: frozenset[str] | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise EncodeInputError(
                f"precision {precision!r} is not available on the torch backend; expected one of "
                f"{', '.join(PRECISIONS)}"
            )
        if precision == "bf16":
            reason = bf16_unsupported(cpu_flags() if flags is None else flags) or torch_bf16_unsupported()
            if reason:
                raise ProviderUnavailableError(f"{artifact.path}: {reason}")
        if threads:
            torch.set_num_threads(threads)
        self.precision = precision
        self.module = build_module(artifact)
        if precision == "bf16":
            gemm_weights_to(self.module, torch.bfloat16)
        self.providers = ["torch-cpu"]

    def _part(self, part: str) -> Recurrence:
        """The recurrence behind an engine part: ``sentence`` (order-embedding) or ``uni`` / ``bi_fwd`` /
        ``bi_bwd`` (skip-thoughts)."""
        return cast(Recurrence, self.module.get_submodule("sentence.rnn" if part == "sentence" else part))

    @torch.inference_mode()
    def recurrent(self, part: str, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """x (T, B, F) float32, lengths (B,) -> state after each row's last valid step (B, d)."""
        rnn = self._part(part)
        return rnn.last_state(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(lengths)).numpy()

    @torch.inference_mode()
    def image_projection(self, features: np.ndarray) -> np.ndarray:
        proj = cast(torch.nn.Linear, self.module.get_submodule("image.proj"))
        return proj(torch.from_numpy(np.ascontiguousarray(features))).numpy()
