"""Parity of the hand-built ONNX encoder graphs with a float64 numpy reference written from the spec (§2-§4):
the production forms (``lnserve.app.runtime.onnx_graph``) and the alternatives the benchmarks measure
(``benchmarks/graph_variants.py``), which are only worth comparing if they compute the same function.

The reference is deliberately naive (Theano (in, out) layout, per-step loop, literal equations, explicit mask
blend) so that it shares no code or algebraic shortcuts (bias folding, mean-shift centring) with the builder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from benchmarks.graph_variants import build_variant_graph  # noqa: E402
from lnserve.app.runtime.onnx_graph import build_image_encoder_graph, build_recurrent_encoder_graph  # noqa: E402

CELLS = ("gru", "lngru", "rlngru", "lstm", "lnlstm", "rlnlstm")
N_IN, D = 12, 16
EPS = 1e-5
TOL = 1e-5


# ------------------------------------------------------------------------------------------ reference maths


def _ln(z: np.ndarray, beta: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    mu = z.mean(-1, keepdims=True)
    var = ((z - mu) ** 2).mean(-1, keepdims=True)
    return gamma * (z - mu) / np.sqrt(var + EPS) + beta


def _rms(z: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    return gamma * z / np.sqrt((z**2).mean(-1, keepdims=True) + EPS)


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _theano(cell: str, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Convert the PyTorch-layout test weights back to the Theano parameter names of spec §4."""
    p = {k: v.astype(np.float64) for k, v in w.items()}
    d = D
    if cell.endswith("gru"):
        out = {
            "W": p["weight_ih"][: 2 * d].T,
            "Wx": p["weight_ih"][2 * d :].T,
            "b": p["bias_ih"][: 2 * d],
            "bx": p["bias_ih"][2 * d :],
            "U": p["weight_hh"][: 2 * d].T,
            "Ux": p["weight_hh"][2 * d :].T,
        }
        names = ("norm_ih_ru", "norm_ih_c", "norm_hh_ru", "norm_hh_c")
    else:
        out = {"W": p["weight_ih"].T, "U": p["weight_hh"].T, "b": p["bias"]}
        names = ("norm_ih", "norm_hh", "norm_cell")
    for k, name in enumerate(names, start=1):
        if f"{name}.weight" in p:
            out[f"s{k}"] = p[f"{name}.weight"]
        if f"{name}.bias" in p:
            out[f"b{k}"] = p[f"{name}.bias"]
    return out


def reference(cell: str, w: dict[str, np.ndarray], x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Float64 spec reference: run all T steps from a zero state with the mask blend, return the final h."""
    P = _theano(cell, w)
    t_len, batch, _ = x.shape
    x = x.astype(np.float64)
    mask = (np.arange(t_len)[:, None] < lengths[None, :]).astype(np.float64)[..., None]
    h = np.zeros((batch, D))
    c = np.zeros((batch, D))
    ln = cell.startswith("ln")
    rms = cell.startswith("rln")

    def norm(z: np.ndarray, k: int) -> np.ndarray:
        if ln:
            return _ln(z, P[f"b{k}"], P[f"s{k}"])
        if rms:
            return _rms(z, P[f"s{k}"])
        return z

    for t in range(t_len):
        m = mask[t]
        if cell.endswith("gru"):
            a = norm(x[t] @ P["W"] + P["b"], 1)
            cx = norm(x[t] @ P["Wx"] + P["bx"], 2)
            pre = a + norm(h @ P["U"], 3)
            r, u = _sig(pre[:, :D]), _sig(pre[:, D:])
            hh = np.tanh(cx + r * norm(h @ P["Ux"], 4))
            h_new = u * h + (1.0 - u) * hh
            h = m * h_new + (1.0 - m) * h
        else:
            p_t = x[t] @ P["W"] + P["b"]
            normed = ln or rms
            q = (norm(p_t, 1) + norm(h @ P["U"], 2) if normed else p_t + h @ P["U"]) + P["b"]
            i, f, o, g = (q[:, k * D : (k + 1) * D] for k in range(4))
            c_new = _sig(f) * c + _sig(i) * np.tanh(g)
            c = m * c_new + (1.0 - m) * c
            h_new = _sig(o) * np.tanh(norm(c, 3) if (ln or rms) else c)
            h = m * h_new + (1.0 - m) * h
    return h


def make_weights(cell: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Small random weights with norm gains away from 1, biases away from 0 and non-zero pre-norm biases."""
    rng = np.random.default_rng(seed)
    d = D
    k = 3 if cell.endswith("gru") else 4
    w: dict[str, np.ndarray] = {
        "weight_ih": rng.normal(0, 0.4, (k * d, N_IN)),
        "weight_hh": rng.normal(0, 0.3, (k * d, d)),
    }
    if k == 3:
        w["bias_ih"] = rng.normal(0.3, 0.5, (k * d,))
        sizes = {"norm_ih_ru": 2 * d, "norm_ih_c": d, "norm_hh_ru": 2 * d, "norm_hh_c": d}
    else:
        w["bias"] = rng.normal(0.2, 0.5, (k * d,))
        sizes = {"norm_ih": 4 * d, "norm_hh": 4 * d, "norm_cell": d}
    if cell.startswith(("ln", "rln")):
        for name, size in sizes.items():
            w[f"{name}.weight"] = rng.uniform(0.5, 1.7, size)
            if cell.startswith("ln"):
                w[f"{name}.bias"] = rng.normal(0.2, 0.4, size)
    return {name: v.astype(np.float32) for name, v in w.items()}


def make_batch(seed: int = 1, t_len: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded mixed-length batch; padded rows are zeros (finite, spec §10 item 15)."""
    rng = np.random.default_rng(seed)
    lengths = np.array([7, 1, 4, 7, 2, 5], np.int64)[:6]
    x = rng.normal(0, 1, (t_len, len(lengths), N_IN)).astype(np.float32)
    x[np.arange(t_len)[:, None] >= lengths[None, :]] = 0.0
    return x, lengths


def session(model: object) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert sess.get_providers()[0] == "CPUExecutionProvider"
    return sess


def run(model: object, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    (h,) = session(model).run(["h"], {"x": x, "lengths": lengths})
    return h


# ------------------------------------------------------------------------------------------ tests


def _variants(cell: str) -> list[tuple[Callable[..., onnx.ModelProto], dict[str, object]]]:
    # opset 17: ReduceMean takes its axes as an attribute (the RMS pattern used to fail the checker there)
    production: list[dict[str, object]] = [{}, {"form": "loop"}, {"opset": 17}, {"opset": 23}]
    benchmark: list[dict[str, object]] = [
        {"form": "loop", "mask": "where"},
        {"form": "scan", "mask": "where"},
        {"steps": 7},
        {"steps": 7, "mask": "where"},
        {"split_gemm": False, "update": "spec"},
        {"norm": "manual"},
    ]
    if cell.startswith("ln"):
        benchmark.append({"norm": "meanshift"})
        benchmark.append({"norm": "meanshift", "steps": 7})
    if cell == "lngru":
        benchmark.append({"gates": "ln-bias"})  # A_t as norm3's LayerNormalization bias
    if cell == "gru":
        production.append({"form": "native"})
    return [(build_recurrent_encoder_graph, kw) for kw in production] + [
        (build_variant_graph, kw) for kw in benchmark
    ]


@pytest.mark.parametrize("cell", CELLS)
def test_matches_float64_reference(cell: str) -> None:
    w = make_weights(cell)
    x, lengths = make_batch()
    ref = reference(cell, w, x, lengths)
    for build, kwargs in _variants(cell):
        h = run(build(cell, w, **kwargs), x, lengths)
        assert h.dtype == np.float32 and h.shape == (len(lengths), D)
        err = float(np.max(np.abs(h.astype(np.float64) - ref)))
        assert err <= TOL, f"{cell} {kwargs}: max |diff| {err:.3g}"


@pytest.mark.parametrize("mask", ["gather", "where"])
@pytest.mark.parametrize("cell", CELLS)
def test_padding_does_not_change_vectors(cell: str, mask: str) -> None:
    w = make_weights(cell, seed=3)
    x, lengths = make_batch(seed=4)
    model = (
        build_recurrent_encoder_graph(cell, w)
        if mask == "gather"
        else build_variant_graph(cell, w, mask=mask)
    )
    sess = session(model)
    (h,) = sess.run(["h"], {"x": x, "lengths": lengths})
    x_pad = np.concatenate([x, np.zeros((5, *x.shape[1:]), np.float32)], axis=0)
    (h_pad,) = sess.run(["h"], {"x": x_pad, "lengths": lengths})
    assert float(np.max(np.abs(h_pad - h))) <= 1e-6
    # each row alone, unpadded, gives the same vector as inside the padded batch
    for b, n in enumerate(lengths):
        (h_one,) = sess.run(["h"], {"x": x[:n, b : b + 1], "lengths": lengths[b : b + 1]})
        assert float(np.max(np.abs(h_one[0] - h[b]))) <= 1e-6


def test_weights_stored_once() -> None:
    w = make_weights("lngru")
    for build, kwargs in (
        (build_recurrent_encoder_graph, {}),
        (build_variant_graph, {"steps": 9}),
        (build_recurrent_encoder_graph, {"form": "loop"}),
        (build_variant_graph, {"split_gemm": False}),
    ):
        model = build("lngru", w, **kwargs)
        n_floats = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
        n_weights = sum(v.size for v in w.values())
        assert n_floats < n_weights + 64, kwargs


def test_image_encoder() -> None:
    rng = np.random.default_rng(5)
    weight = rng.normal(0, 0.1, (D, 40)).astype(np.float32)
    bias = rng.normal(0, 0.1, (D,)).astype(np.float32)
    feats = rng.normal(0, 1, (3, 40)).astype(np.float32)
    (out,) = session(build_image_encoder_graph(weight, bias)).run(["projected"], {"features": feats})
    ref = feats.astype(np.float64) @ weight.T.astype(np.float64) + bias
    assert out.shape == (3, D)
    assert float(np.max(np.abs(out - ref))) <= TOL


def test_rejects_bad_input() -> None:
    w = make_weights("lngru")
    with pytest.raises(ValueError):
        build_recurrent_encoder_graph("bogus", w)
    with pytest.raises(ValueError):
        build_recurrent_encoder_graph("lngru", w, form="native")
    bad = dict(w)
    del bad["norm_hh_c.bias"]
    with pytest.raises(KeyError):
        build_recurrent_encoder_graph("lngru", bad)


@pytest.mark.parametrize("cell", CELLS)
def test_benchmark_default_is_the_production_graph(cell: str) -> None:
    """The benchmarks' "(default)" row measures exactly the graph the runtime serves."""
    w = make_weights(cell)
    for kwargs in ({}, {"form": "loop"}, {"opset": 23}):
        served = build_recurrent_encoder_graph(cell, w, **kwargs).SerializeToString()
        assert build_variant_graph(cell, w, **kwargs).SerializeToString() == served, kwargs


def test_production_builder_has_only_the_served_forms() -> None:
    w = make_weights("lngru")
    for kwargs in ({"form": "unrolled"}, {"opset": 16}):
        with pytest.raises(ValueError):
            build_recurrent_encoder_graph("lngru", w, **kwargs)
