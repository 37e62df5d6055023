"""Theano parameter names -> PyTorch module names: which arrays concatenate, which transpose, what shape.

Legacy names (``encoder_Wx``) appear only here and in ``detect.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from ..models.cell_types import GRU_CELLS, LSTM_CELLS
from .errors import MissingParameterError, ShapeMismatchError

NormGroups = tuple[tuple[str, str, int], ...]  # (legacy suffix, norm module, gate blocks)
_NORM_GROUPS_GRU: NormGroups = (
    ("1", "norm_ih_ru", 2),
    ("2", "norm_ih_c", 1),
    ("3", "norm_hh_ru", 2),
    ("4", "norm_hh_c", 1),
)
_NORM_GROUPS_LSTM: NormGroups = (("1", "norm_ih", 4), ("2", "norm_hh", 4), ("3", "norm_cell", 1))


def expected_cell_shapes(prefix: str, cell: str, n_in: int, d: int) -> dict[str, tuple[int, ...]]:
    """Every legacy key a cell of this type needs, with its shape (Theano (in, out) layout)."""
    if cell in GRU_CELLS:
        shapes: dict[str, tuple[int, ...]] = {
            "W": (n_in, 2 * d),
            "b": (2 * d,),
            "U": (d, 2 * d),
            "Wx": (n_in, d),
            "Ux": (d, d),
            "bx": (d,),
        }
        groups = _NORM_GROUPS_GRU
    elif cell in LSTM_CELLS:
        shapes = {"W": (n_in, 4 * d), "U": (d, 4 * d), "b": (4 * d,)}
        groups = _NORM_GROUPS_LSTM
    else:
        raise ValueError(f"unknown cell type {cell!r}")
    for idx, _, mult in groups:
        if cell.startswith(("ln", "rln")):
            shapes[f"s{idx}"] = (mult * d,)
        if cell.startswith("ln"):
            shapes[f"b{idx}"] = (mult * d,)
    return {f"{prefix}_{name}": shape for name, shape in shapes.items()}


class Shaped(Protocol):
    """An array, or just what its ``.npy`` header declares (checked before any data is read)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...


def check_params(
    params: Mapping[str, Shaped], expected: Mapping[str, tuple[int, ...]], *, source: str
) -> None:
    """Collect every missing key and every bad shape or dtype, then raise once."""
    missing = sorted(k for k in expected if k not in params)
    if missing:
        raise MissingParameterError(f"{source}: missing parameter(s) {', '.join(missing)}")
    problems = []
    for key, shape in expected.items():
        arr = params[key]
        if tuple(arr.shape) != shape:
            problems.append(f"{key}: expected shape {shape}, found {tuple(arr.shape)}")
        elif arr.dtype != np.float32:
            problems.append(f"{key}: expected float32, found {arr.dtype}")
    if problems:
        raise ShapeMismatchError(f"{source}: " + "; ".join(problems))


def cell_state_dict(params: Mapping[str, np.ndarray], prefix: str, cell: str) -> dict[str, np.ndarray]:
    """Module-named tensors for one cell, in PyTorch (out, in) layout (call ``check_params`` first)."""
    p = {k[len(prefix) + 1 :]: v for k, v in params.items() if k.startswith(prefix + "_")}
    if cell in GRU_CELLS:
        out = {
            "weight_ih": np.concatenate([p["W"], p["Wx"]], axis=1).T,  # rows [r; u; candidate]
            "bias_ih": np.concatenate([p["b"], p["bx"]]),
            "weight_hh": np.concatenate([p["U"], p["Ux"]], axis=1).T,
        }
        groups = _NORM_GROUPS_GRU
    else:
        out = {"weight_ih": p["W"].T, "weight_hh": p["U"].T, "bias": p["b"]}  # gate order stays i, f, o, g
        groups = _NORM_GROUPS_LSTM
    for idx, name, _ in groups:
        if f"s{idx}" in p and cell.startswith(("ln", "rln")):
            out[f"{name}.weight"] = p[f"s{idx}"]
        if f"b{idx}" in p and cell.startswith("ln"):
            out[f"{name}.bias"] = p[f"b{idx}"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def legacy_cell_params(tensors: Mapping[str, np.ndarray], prefix: str, cell: str) -> dict[str, np.ndarray]:
    """The inverse of ``cell_state_dict``: module-named cell tensors -> Theano names in (in, out) layout."""
    if cell in GRU_CELLS:
        d = tensors["weight_hh"].shape[1]
        w_ih, w_hh = tensors["weight_ih"].T, tensors["weight_hh"].T  # (n_in, 3d), (d, 3d)
        out = {
            "W": w_ih[:, : 2 * d],
            "Wx": w_ih[:, 2 * d :],
            "b": tensors["bias_ih"][: 2 * d],
            "bx": tensors["bias_ih"][2 * d :],
            "U": w_hh[:, : 2 * d],
            "Ux": w_hh[:, 2 * d :],
        }
        groups = _NORM_GROUPS_GRU
    elif cell in LSTM_CELLS:
        out = {"W": tensors["weight_ih"].T, "U": tensors["weight_hh"].T, "b": tensors["bias"]}
        groups = _NORM_GROUPS_LSTM
    else:
        raise ValueError(f"unknown cell type {cell!r}")
    for idx, name, _ in groups:
        if cell.startswith(("ln", "rln")):
            out[f"s{idx}"] = tensors[f"{name}.weight"]
        if cell.startswith("ln"):
            out[f"b{idx}"] = tensors[f"{name}.bias"]
    return {f"{prefix}_{k}": np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def extra_keys(params: Iterable[str], used: Iterable[str]) -> list[str]:
    return sorted(set(params) - set(used))
