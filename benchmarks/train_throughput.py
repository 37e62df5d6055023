"""Training throughput (examples/s) of each GRU cell at the published order-embedding dims, with same-run
baselines.

One example is one (caption, image) pair: a full update of the original recipe (sentence encoder over T steps,
image projection 4096 -> 1024, contrastive loss over the batch, backward, per-gradient clipping, Adam).
Baselines measured in the same run:

* ``nn.GRU``: forward + backward of torch's fused GRU at the same dims (sentence encoder only);
* the FLOP ceiling: torch's own fp32 matmul GFLOP/s (2048^3) divided by the FLOPs of one example,
  3 x forward (forward + backward's two GEMMs per forward GEMM): T x 8.13 MFLOP sentence (spec §11) +
  8.4 MFLOP image. ``ceiling`` is the fraction of it reached.

    python benchmarks/train_throughput.py [--device cpu|cuda|auto] [--batch 128] [--steps 13] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's models, not an installed one
from lnserve.models.encoders import OrderEmbedding, OrderEmbeddingConfig
from lnserve.models.init import init_order_embedding
from lnserve.models.losses import clip_each_gradient, contrastive_loss

DIM_WORD, DIM, DIM_IMAGE, N_WORDS = 300, 1024, 4096, 10000


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], reps: int, device: torch.device) -> float:
    """Median wall time of ``reps`` runs after one warm-up."""
    fn()
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_gflops(device: torch.device, n: int = 2048) -> float:
    a, b = (torch.randn(n, n, device=device) for _ in range(2))
    return 2 * n**3 / timed(lambda: a @ b, 5, device) / 1e9


def flops_per_example(steps: int) -> float:
    per_token = 2 * DIM_WORD * 3 * DIM + 2 * DIM * 3 * DIM  # input + recurrent GEMMs (8.13 MFLOP)
    return 3 * (steps * per_token + 2 * DIM_IMAGE * DIM)


def train_step_fn(cell: str, batch: int, steps: int, device: torch.device) -> Callable[[], object]:
    cfg = OrderEmbeddingConfig(cell, N_WORDS, DIM_WORD, DIM, DIM_IMAGE, use_abs=True)
    model = OrderEmbedding(cfg)
    init_order_embedding(model, seed=0)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = torch.randint(2, N_WORDS, (steps, batch), device=device)
    lengths = torch.full((batch,), steps, device=device)
    images = torch.randn(batch, DIM_IMAGE, device=device)

    def step() -> None:
        loss = contrastive_loss(
            model.sentence(ids, lengths), model.image(images), method="order", margin=0.05
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_each_gradient(list(model.parameters()), 2.0)
        opt.step()

    return step


def torch_gru_fn(batch: int, steps: int, device: torch.device) -> Callable[[], object]:
    gru = torch.nn.GRU(DIM_WORD, DIM).to(device)
    x = torch.randn(steps, batch, DIM_WORD, device=device, requires_grad=True)

    def step() -> None:
        _, h = gru(x)
        h.sum().backward()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=13, help="Tokens per caption, eos included.")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(auto if args.device == "auto" else args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x {torch.get_num_threads()}"
    gflops = matmul_gflops(device)
    ceiling = gflops * 1e9 / flops_per_example(args.steps)
    print(f"device {name}; torch {torch.__version__}; batch {args.batch}, T {args.steps}, {DIM_WORD}->{DIM}")
    print(f"fp32 matmul 2048^3: {gflops:.0f} GFLOP/s -> ceiling {ceiling:.0f} examples/s")
    print(f"{'what':28} {'s/update':>9} {'examples/s':>11} {'vs nn.GRU':>10} {'ceiling':>8}")
    base = args.batch / timed(torch_gru_fn(args.batch, args.steps, device), args.reps, device)
    label = "nn.GRU fwd+bwd (baseline)"
    print(f"{label:28} {args.batch / base:9.3f} {base:11.0f} {1.0:10.2f} {base / ceiling:8.2f}")
    for cell in ("gru", "lngru", "rlngru"):
        sec = timed(train_step_fn(cell, args.batch, args.steps, device), args.reps, device)
        rate = args.batch / sec
        print(f"{'train step ' + cell:28} {sec:9.3f} {rate:11.0f} {rate / base:10.2f} {rate / ceiling:8.2f}")


if __name__ == "__main__":
    main()
