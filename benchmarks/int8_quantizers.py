"""How to quantise the LN-GRU encoder to int8, measured: onnxruntime's own dynamic quantiser against ours.

Run: ``.venv/bin/python benchmarks/int8_quantizers.py [--batch 128] [--steps 13] [--seconds 2]``.

On a random LN-GRU at the published dims (300 -> 1024), in one run:

* ``fp32``: the served fp32 graph (plain standard ONNX, so every row is comparable);
* ``ort dynamic``: ``onnxruntime.quantization.quantize_dynamic`` (int8 weights per channel) applied to that
  graph, the library's answer for recurrent models without a calibration set;
* ``ours full`` / ``ours pair-safe``: ``onnx_graph.gemms`` with each activation scheme (plain graph too).

For each: which products are integer (MatMulInteger / MatMulIntegerToFloat nodes in the main graph and in the
Scan body), the batch's time and its speed-up over fp32 (best call of ``--seconds``), every vector's cosine to
fp32 (minimum), and whether a sentence's vector depends on its batch: the largest difference between the first
8 rows encoded in the batch and each encoded alone (the fidelity standard allows 1e-5 for padding and
batching). Inputs are random (T, B, 300) word vectors at a trained table's scale.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.encode_throughput import lngru_weights  # noqa: E402
from lnserve.app.runtime.cpu_features import cpu_flags, int8_scheme_for, isa_summary  # noqa: E402
from lnserve.app.runtime.onnx_backend import session_options  # noqa: E402
from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph  # noqa: E402

INTEGER_OPS = {"MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}


def integer_products(model: onnx.ModelProto) -> str:
    """Which GEMMs run in integers: 'input', 'recurrent', both or none."""

    def ops(graph: onnx.GraphProto) -> set[str]:
        return {n.op_type for n in graph.node}

    body = {
        op
        for n in model.graph.node
        for a in n.attribute
        if a.type == onnx.AttributeProto.GRAPH
        for op in ops(a.g)
    }
    where = [
        name for name, found in (("input", ops(model.graph)), ("recurrent", body)) if found & INTEGER_OPS
    ]
    return " + ".join(where) or "none"


def session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    return ort.InferenceSession(
        model.SerializeToString(), session_options(threads), providers=["CPUExecutionProvider"]
    )


def ort_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True)
        return onnx.load(dst)


def best_call(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], seconds: float) -> float:
    sess.run(["h"], feeds)
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        sess.run(["h"], feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=13)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 8))
    args = parser.parse_args()
    flags = cpu_flags()
    print(
        f"load average {os.getloadavg()[0]:.2f} | cpu_count {os.cpu_count()} | {isa_summary(flags)} | "
        f"this CPU's int8 scheme: {int8_scheme_for(flags)} | LN-GRU 300->1024, B={args.batch}, T={args.steps}"
    )
    w = lngru_weights(300, 1024)
    fp32 = build_recurrent_encoder_graph("lngru", w)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = {
            "fp32": fp32,
            "ort dynamic": ort_dynamic(fp32),
            "ours full": build_recurrent_encoder_graph("lngru", w, precision="int8", int8_scheme="full"),
            "ours pair-safe": build_recurrent_encoder_graph(
                "lngru", w, precision="int8", int8_scheme="pair-safe"
            ),
        }
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((args.steps, args.batch, 300)) * 0.1).astype(np.float32)
    lengths = rng.integers(3, args.steps + 1, args.batch).astype(np.int64)
    feeds = {"x": x, "lengths": lengths}
    sessions = {name: session(m, args.threads) for name, m in models.items()}
    ref = sessions["fp32"].run(["h"], feeds)[0]
    times = {name: best_call(s, feeds, args.seconds) for name, s in sessions.items()}
    print(
        f"{'method':16} {'integer GEMMs':18} {'ms':>8} {'vs fp32':>8} {'min cosine':>11} "
        f"{'batch changes a vector by':>26}"
    )
    for name, sess in sessions.items():
        h = sess.run(["h"], feeds)[0]
        alone = np.concatenate(
            [sess.run(["h"], {"x": x[:, i : i + 1], "lengths": lengths[i : i + 1]})[0] for i in range(8)]
        )
        print(
            f"{name:16} {integer_products(models[name]):18} {times[name] * 1e3:8.2f} "
            f"{times['fp32'] / times[name]:7.2f}x {cosines(h, ref).min():11.6f} "
            f"{np.abs(h[:8] - alone).max():26.1e}"
        )


if __name__ == "__main__":
    main()
