"""The fused LN-GRU ops (onnxruntime custom ops, ``lnserve.app.runtime.fused_op``) against the plain graph.

Run: ``.venv/bin/python benchmarks/fused_step_op.py [--seconds 1.5] [--rounds 3] [--threads 2]
[--cells lngru rlngru] [--dims ...] [--batches 1 32 128]`` on an otherwise idle machine.

For the demo model's dims (32 -> 64), small order-embedding cells (300 -> 128, 256, 512), the published
order-embedding dims (300 -> 1024) and the uni-skip dims (620 -> 2400), T = 13 and each batch size, it times,
interleaved in one process (onnxruntime only: no torch, whose OpenMP threads would spin):

* ``ceil``: a 2048^3 fp32 MatMul through onnxruntime (B as an initializer, so prepacked like the recurrent
  weights), measured right before and right after each cell; the better of the two is that cell's ceiling;
* ``plain``: the production graph (Scan; the step's norms and gates as standard ONNX ops);
* ``fused``: the same graph with the step's pointwise part as one ``ai.lnserve`` custom op;
* ``seq``: the whole recurrence, input side included, as one ``ai.lnserve`` custom op with its own GEMMs
  (``LnGruSequence``). The backend serves it for states up to ``SEQUENCE_MAX_D`` wide (the ``served``
  column), the step op above that: this table is where that threshold comes from.

Each time is the best call over ``--seconds``, spent in ``--rounds`` alternating slices of the graphs
(interference on a shared VM only ever adds time, and alternating spreads it over every graph). The table
gives each graph's throughput over the ceiling (FLOP per token x T x B / time / ceiling rate), the speed-ups
fused/plain and seq/fused, and the largest |fused - plain| and |seq - plain| over the batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lnserve.app.runtime.fused_op import uses_sequence_op
from lnserve.app.runtime.fused_op.loader import fused_op_status, random_cell_weights, register
from lnserve.app.runtime.onnx_backend import session_options
from lnserve.app.runtime.onnx_graph import build_recurrent_encoder_graph

DIMS = {
    "demo 32->64": (32, 64),
    "OE 300->128": (300, 128),
    "OE 300->256": (300, 256),
    "OE 300->512": (300, 512),
    "OE 300->1024": (300, 1024),
    "uni-skip 620->2400": (620, 2400),
}
STEPS = 13


def flop_per_token(n_in: int, d: int) -> float:
    """The GEMM work of one token: input projection (hoisted) and recurrent projection, 3 gates each."""
    return 2.0 * n_in * 3 * d + 2.0 * d * 3 * d


def best_time(fn: Callable[[], object], seconds: float) -> float:
    """Fastest call over ~``seconds`` of calls, after one warm-up call."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while not times or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def best_interleaved(fns: dict[str, Callable[[], object]], seconds: float, rounds: int) -> dict[str, float]:
    """Best call of each function over ``seconds`` each, in ``rounds`` alternating slices."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], best_time(fn, seconds / rounds))
    return best


def ceiling_session(threads: int, n: int = 2048) -> tuple[ort.InferenceSession, np.ndarray]:
    rng = np.random.default_rng(1)
    b = numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32), "b")
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    graph = helper.make_graph(
        [node],
        "mm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        [b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    sess = ort.InferenceSession(
        model.SerializeToString(), session_options(threads), providers=["CPUExecutionProvider"]
    )
    return sess, rng.standard_normal((n, n), dtype=np.float32)


def encoder_session(
    cell: str, weights: dict[str, np.ndarray], threads: int, fused: bool, sequence_op: bool = False
) -> ort.InferenceSession:
    options = session_options(threads)
    if fused:
        register(options, fused_op_status().library)
    model = build_recurrent_encoder_graph(cell, weights, fused=fused, sequence_op=sequence_op, check=False)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(args: argparse.Namespace) -> None:
    status = fused_op_status()
    if not status.available:
        raise SystemExit(f"the fused op is not available: {status.reason}")
    ceil_sess, ceil_a = ceiling_session(args.threads)
    n = ceil_a.shape[0]

    def ceiling_gflops() -> float:
        return 2 * n**3 / best_time(lambda: ceil_sess.run(None, {"a": ceil_a}), args.seconds) / 1e9

    print(
        f"onnxruntime {ort.__version__} | threads {args.threads} | T = {STEPS} | "
        f"best of {args.seconds} s per graph and cell, in {args.rounds} alternating slices"
    )
    header = (
        f"{'cell':<7}{'dims':<19}{'B':>4} | {'ceil GF/s':>9} | "
        f"{'plain ms':>8} {'fused ms':>8} {'seq ms':>8} | {'plain/ceil':>10} {'fused/ceil':>10} "
        f"{'seq/ceil':>8} | {'fused/plain':>11} {'seq/fused':>9} | "
        f"{'served':>6} | {'max|diff|':>9} {'seq diff':>9}"
    )
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for cell in args.cells:
        for label in args.dims:
            n_in, d = DIMS[label]
            weights = random_cell_weights(np.random.default_rng(0), cell, n_in, d)
            plain = encoder_session(cell, weights, args.threads, fused=False)
            fused = encoder_session(cell, weights, args.threads, fused=True)
            seq = encoder_session(cell, weights, args.threads, fused=True, sequence_op=True)
            served = "seq" if uses_sequence_op(d, "fp32") else "fused"
            for b in args.batches:
                x = rng.standard_normal((STEPS, b, n_in)).astype(np.float32)
                lengths = rng.integers(1, STEPS + 1, b).astype(np.int64)
                lengths[0] = STEPS
                feeds = {"x": x, "lengths": lengths}
                want = plain.run(["h"], feeds)[0]
                diff = float(np.max(np.abs(want - fused.run(["h"], feeds)[0])))
                seq_diff = float(np.max(np.abs(want - seq.run(["h"], feeds)[0])))
                before = ceiling_gflops()
                times = best_interleaved(
                    {
                        "plain": lambda s=plain, f=feeds: s.run(["h"], f),
                        "fused": lambda s=fused, f=feeds: s.run(["h"], f),
                        "seq": lambda s=seq, f=feeds: s.run(["h"], f),
                    },
                    args.seconds,
                    args.rounds,
                )
                t_plain, t_fused, t_seq = times["plain"], times["fused"], times["seq"]
                ceil = max(before, ceiling_gflops())
                work = flop_per_token(n_in, d) * STEPS * b / 1e9  # GFLOP per call
                print(
                    f"{cell:<7}{label:<19}{b:>4} | {ceil:>9.0f} | "
                    f"{t_plain * 1e3:>8.2f} {t_fused * 1e3:>8.2f} {t_seq * 1e3:>8.2f} | "
                    f"{work / t_plain / ceil:>10.2f} {work / t_fused / ceil:>10.2f} "
                    f"{work / t_seq / ceil:>8.2f} | {t_plain / t_fused:>11.2f} {t_fused / t_seq:>9.2f} | "
                    f"{served:>6} | {diff:>9.1e} {seq_diff:>9.1e}"
                )
    print(
        "x/ceil: throughput over the cell's ceiling (GEMM FLOP only; the norms and gates are overhead); "
        "fused/plain > 1: the step op is faster than the plain Scan; seq/fused > 1: the sequence op is "
        "faster than the step op; served: what the backend runs at this width; diffs: vs plain, same inputs. "
        "The FLOP count is T x B tokens, padding included (lengths are drawn from 1..T): the Scan graphs "
        "compute padding steps, the sequence op skips them, so seq/ceil can pass 1."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=3, help="alternating slices per cell")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cells", nargs="+", default=["lngru", "rlngru"], choices=["lngru", "rlngru"])
    p.add_argument("--batches", nargs="+", type=int, default=[1, 12, 32, 128])
    p.add_argument("--dims", nargs="+", default=list(DIMS), choices=list(DIMS))
    run(p.parse_args())


if __name__ == "__main__":
    main()
