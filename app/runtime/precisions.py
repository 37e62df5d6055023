"""The precision profiles: which backend runs each, which are exact, and what a gallery pins of them.

* ``fp32``: the exact profile (1e-5 from the original code), on either backend.
* ``fp16``: for GPUs, onnxruntime (float16 weights and arithmetic; norm statistics stay float32).
* ``int8``: for CPUs, onnxruntime (``onnx_graph.gemms``: int8 products, float32 norms, gates and state).
* ``bf16``: for CPUs with AVX-512 BF16 or AMX, the torch backend (oneDNN's bf16 kernels for the products).

The fidelity contract of each approximate profile is measured by ``benchmarks/precision_contract.py`` and
published in docs/precision.md.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from .errors import EncodeInputError

Precision = Literal["fp32", "fp16", "int8", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
EXACT = "fp32"
BACKEND_OF: dict[str, str] = {"fp16": "onnx", "int8": "onnx", "bf16": "torch"}  # fp32: either
IMAGE_PRECISION: dict[str, str] = {"fp16": "fp16"}  # the others run the image projection in float32
# what a gallery may pin (read from disk): ``<identity>[:<precision>]``, a calibrated int8 as ``int8@<tag>``
IDENTITY = re.compile(r"[0-9a-f]{64}(?::(?:fp16|int8(?:@[0-9a-f]{16})?|bf16))?")
HELP = "fp32 (exact), int8 (CPU), bf16 (CPU with AVX-512 BF16 or AMX; torch) or fp16 (GPU)"


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise EncodeInputError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    return precision


def backend_for(precision: str, backend: str) -> str:
    """The backend that runs ``precision``: the one asked for when it can, else the profile's own.

    fp32 runs on either; bf16 only on torch (onnxruntime has no bf16 GEMM on the CPU), int8 and fp16 only
    on onnxruntime. Asking for torch with int8 or fp16 is an error (the user chose torch on purpose);
    the default onnx backend moves to torch for bf16, as the caller logs."""
    own = BACKEND_OF.get(check_precision(precision))
    if own is None or own == backend:
        return backend
    if own == "onnx":
        raise EncodeInputError(f"precision {precision} runs on the onnx backend, not {backend}")
    return own


def pinned_precision(precision: str, kind: str) -> str:
    """The precision of the vectors a gallery of ``kind`` holds when a model serves at ``precision``:
    captions come from the text encoder at the served precision; images from the image projection, which
    runs in float32 in every profile but fp16."""
    return precision if kind == "captions" else IMAGE_PRECISION.get(precision, EXACT)


def with_precision(identity: str, precision: str, calibration: str | None = None) -> str:
    """A model identity qualified by a precision: unchanged for fp32 (galleries made before profiles keep
    matching), ``<sha256>:<precision>`` otherwise; int8 of a calibrated artifact also names its calibration
    (``<sha256>:int8@<tag>``, ``converters.int8_calibration``), whose peaks change its vectors."""
    if precision == EXACT:
        return identity
    tagged = f"{precision}@{calibration}" if precision == "int8" and calibration else precision
    return f"{identity}:{tagged}"


def split_identity(identity: str) -> tuple[str, str]:
    """(the model's identity, the precision) of what a gallery pins; a calibration tag is left out."""
    base, _, precision = identity.partition(":")
    return base, precision.partition("@")[0] or EXACT


def calibration_of(identity: str) -> str | None:
    """The int8 calibration tag a pin names, if any."""
    return identity.partition("@")[2] or None


def one_profile(*pins: tuple[str, str]) -> bool:
    """Whether vectors pinned as (gallery kind, identity) can all come from one model served at one
    precision, and so be scored against each other: an int8 caption gallery with a float32 image gallery
    (int8's images are float32), never an int8 caption gallery with an fp32 one."""
    split = [(kind, *split_identity(identity)) for kind, identity in pins]
    if len({base for _, base, _ in split}) > 1:
        return False
    if len({calibration_of(identity) for _, identity in pins if split_identity(identity)[1] == "int8"}) > 1:
        return False  # int8 vectors of two calibrations
    return any(all(pinned_precision(p, kind) == at for kind, _, at in split) for p in PRECISIONS)


def describe_identity(identity: str) -> str:
    """Short form for messages: the first 12 hex digits and the precision."""
    base, precision = split_identity(identity)
    tag = calibration_of(identity)
    return f"{base[:12]} at {precision}" + (f" (calibration {tag[:8]})" if tag else "")
