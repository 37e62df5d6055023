"""The int8 products of ``onnx_graph.gemms``: per-column weight scales, activations that cannot saturate
AVX2's 16-bit pair sums, and onnxruntime's result equal to the exact integer arithmetic, on whatever CPU
runs the test (on an AVX2 host without VNNI, a saturating kernel would fail the adversarial case)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from lnserve.app.runtime.cpu_features import cpu_flags, int8_scheme_for
from lnserve.app.runtime.onnx_backend import session_options
from lnserve.app.runtime.onnx_graph.builder import GraphBuilder, make_model, value_info
from lnserve.app.runtime.onnx_graph.gemms import (
    FULL,
    INT16_MAX,
    PAIR_SAFE,
    SCHEMES,
    WEIGHT_LEVELS,
    Int8Gemms,
    Int8Scheme,
    quantize_columns,
)


@pytest.mark.parametrize("scheme", SCHEMES.values(), ids=list(SCHEMES))
def test_activations_fit_uint8(scheme: Int8Scheme) -> None:
    assert scheme.zero_point - scheme.levels >= 0 and scheme.zero_point + scheme.levels <= 255


def test_the_avx2_scheme_cannot_saturate_a_pair() -> None:
    assert WEIGHT_LEVELS <= 127 and PAIR_SAFE.pair_bound <= INT16_MAX < FULL.pair_bound


@pytest.mark.parametrize(
    ("flags", "scheme"),
    [
        ({"avx2", "fma"}, PAIR_SAFE),  # AMD EPYC Zen 2/3, Intel before Ice Lake: vpmaddubsw
        ({"avx2", "fma", "avx512f", "avx512bw"}, PAIR_SAFE),  # Skylake-SP: AVX-512 without VNNI
        ({"avx2", "avx512f", "avx512_vnni"}, FULL),  # Cascade Lake+, Zen 4/5
        ({"avx2", "avx_vnni"}, FULL),  # Alder Lake+
        ({"avx2", "avx512_vnni", "amx_int8", "amx_bf16"}, FULL),  # Sapphire Rapids
        (set(), PAIR_SAFE),  # flags unknown: the scheme that is exact everywhere
    ],
)
def test_the_scheme_follows_the_cpu(flags: set[str], scheme: Int8Scheme) -> None:
    assert int8_scheme_for(flags) == scheme.name


def test_columns_are_scaled_one_by_one() -> None:
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, (64, 5)).astype(np.float32) * np.array([1e-3, 1.0, 10.0, 0.0, 1e4], np.float32)
    q, scale = quantize_columns(w)
    assert q.dtype == np.int8 and np.abs(q.astype(np.int32)).max() <= WEIGHT_LEVELS
    assert scale[3] == 1.0 and not q[:, 3].any()  # a zero column
    live = [0, 1, 2, 4]
    assert (np.abs(q[:, live]).max(axis=0) == WEIGHT_LEVELS).all()  # each column uses its full range
    assert (np.abs(q * scale - w) <= scale / 2 * (1 + 1e-6)).all()


def product_session(
    w: np.ndarray, how: str, scheme: Int8Scheme, peaks: np.ndarray | None = None
) -> ort.InferenceSession:
    g, gemms = GraphBuilder(), Int8Gemms(scheme, peaks)
    name = gemms.weight(g, w, "W", state=how == "state")
    out = gemms.by_state(g, "v", name) if how == "state" else gemms.by_token(g, "v", name)
    g.nodes.append(helper.make_node("Identity", [out], ["y"]))
    graph = helper.make_graph(
        g.nodes,
        "product",
        [value_info("v", TensorProto.FLOAT, ["B", w.shape[0]])],
        [value_info("y", TensorProto.FLOAT, ["B", w.shape[1]])],
        list(g.inits.values()),
    )
    model = make_model(graph, 18, domains=dict(gemms.domains))
    return ort.InferenceSession(
        model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"]
    )


def exact(
    v: np.ndarray, w: np.ndarray, how: str, scheme: Int8Scheme, peaks: np.ndarray | None = None
) -> np.ndarray:
    """The same quantisation, multiplied in int64 (no saturation possible), scaled back in float64; a
    calibrated state is divided by its feature peaks and clipped, and the weight rows multiplied by them."""
    peak = np.abs(v).max(axis=1, keepdims=True) if how == "token" else np.ones((len(v), 1))
    if peaks is not None:
        v, w = np.clip(v * (1 / peaks), -1, 1), peaks[:, None] * w
    qa = np.rint(v / peak * scheme.levels).astype(np.int64)
    qw, scale = quantize_columns(w)
    return (qa @ qw.astype(np.int64)) * (scale.astype(np.float64) / scheme.levels) * peak


@pytest.mark.parametrize("how", ["state", "token", "calibrated state"])
def test_onnxruntime_computes_the_exact_integers(how: str) -> None:
    """Adversarial: activations at +-1 and weights at +-127 of the same sign along k, the worst case for a
    16-bit pair sum; plus random values. A calibrated state (per-feature peaks, some far below the values
    they meet) is clipped to the same codes, so it cannot saturate a pair either."""
    k, n = 256, 48
    rng = np.random.default_rng(1)
    signs = np.where(rng.random(k) < 0.5, -1.0, 1.0).astype(np.float32)
    w = np.outer(signs, np.ones(n, np.float32)) * rng.uniform(0.5, 1.0, (1, n)).astype(np.float32)
    worst = np.stack([signs, -signs, np.ones(k, np.float32)])
    v = np.concatenate([worst, np.tanh(rng.normal(0, 1, (5, k))).astype(np.float32)])
    if how == "token":
        v = v * np.array([[3.0], [0.01], [250.0], [1], [2], [3], [4], [5]], np.float32)
    scheme = SCHEMES[int8_scheme_for(cpu_flags())]  # the one this CPU runs: exact here
    peaks = rng.uniform(1 / 32, 1.0, k).astype(np.float32) if how == "calibrated state" else None
    how = how.removeprefix("calibrated ")
    got = product_session(w, how, scheme, peaks).run(["y"], {"v": v})[0]
    want = exact(v, w, how, scheme, peaks)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("cell", ["gru", "lngru", "rlngru"])
def test_each_activation_is_quantised_once(cell: str) -> None:
    """The word vectors once before the input projections, the state once per step before its products
    (the plain GRU multiplies each by two matrices: W_ru and W_c, U_ru and U_c)."""
    from lnserve.app.runtime.fused_op.loader import random_cell_weights
    from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph

    weights = random_cell_weights(np.random.default_rng(0), cell, 8, 16)
    model = build_recurrent_encoder_graph(cell, weights, precision="int8", check=False)
    (scan,) = [n for n in model.graph.node if n.op_type == "Scan"]
    body = scan.attribute[0].g
    assert [n.op_type for n in model.graph.node].count("QuantizeLinear") == 1
    assert [n.op_type for n in body.node].count("QuantizeLinear") == 1
