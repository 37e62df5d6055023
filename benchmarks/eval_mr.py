"""A full MR run of ``lnserve eval skip-thoughts`` (10,662 sentences) on synthetic combine-skip-sized vectors,
faithful protocol against the fast mode, in the same run.

Writes ``rt-polarity.pos`` / ``.neg`` (5,331 lines each, latin-1) to a temp dir and gives every sentence a
4,800-d vector built like combine-skip's (2,400 uni + 2,400 bi, each part L2-normalised, as
``skipthoughts.encode(use_norm=True)``), with a weak class signal so C selection has something to choose.
Encoding is not timed (it is a lookup): the table times the protocol, reading the files included.

    python benchmarks/eval_mr.py [--sentences 10662] [--jobs 1] [--modes faithful,fast] [--json OUT]

The fast mode runs its L-BFGS on CUDA when torch sees a GPU, else on the CPU (``--fast-device`` to force).
Baseline in the same run: one faithful liblinear fit on a full outer-fold training set (the unit the
faithful protocol repeats 910 times).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
try:
    import lnserve.app
except ImportError:  # a bare machine with the checkout only: map lnserve.app / .converters to their folders
    import lnserve

    lnserve.__path__.append(str(ROOT))

from lnserve.app.evaluation import linear, protocols  # noqa: E402
from lnserve.app.evaluation.folds import kfold  # noqa: E402

UNI = BI = 2400


def write_mr(directory: Path, n: int) -> list[str]:
    half = n // 2
    pos = [f"pos sentence {i} caf\u00e9 ." for i in range(half)]
    neg = [f"neg sentence {i} ." for i in range(n - half)]
    (directory / "rt-polarity.pos").write_bytes(("\n".join(pos) + "\n").encode("latin-1"))
    (directory / "rt-polarity.neg").write_bytes(("\n".join(neg) + "\n").encode("latin-1"))
    return pos + neg


def combine_skip_like(texts: Sequence[str], seed: int = 0, signal: float = 0.015) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=UNI + BI)
    vecs = rng.normal(size=(len(texts), UNI + BI)).astype(np.float32)
    sign = np.array([1.0 if t.startswith("pos") else -1.0 for t in texts], dtype=np.float32)
    vecs += (
        signal * np.sqrt(UNI + BI) * sign[:, None] * direction[None, :] / np.linalg.norm(direction)
    ).astype(np.float32)
    for part in (slice(0, UNI), slice(UNI, UNI + BI)):
        vecs[:, part] /= np.linalg.norm(vecs[:, part], axis=1, keepdims=True)
    return dict(zip(texts, vecs, strict=True))


class LookupEncoder:
    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def __call__(self, texts: Sequence[str], *, eos: bool | None, what: str = "") -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=10662)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--modes", default="faithful,fast")
    ap.add_argument("--fast-device", default=None, help="cpu or cuda (default: cuda if available)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        texts = write_mr(Path(tmp), args.sentences)
        encoder = LookupEncoder(combine_skip_like(texts))
        x = encoder(texts, eos=False)
        y = np.array([1.0 if t.startswith("pos") else 0.0 for t in texts])
        train, _ = kfold(len(x), 10)[0]
        t0 = time.perf_counter()
        linear.fit_liblinear(x[train], y[train], 1.0)
        one_fit = time.perf_counter() - t0
        print(f"baseline: one liblinear fit on {len(train)} x {x.shape[1]}: {one_fit:.1f} s", flush=True)
        for mode in args.modes.split(","):
            if mode == "fast" and args.fast_device:
                orig = linear.fit_batched

                def pinned(*a: object, _orig: object = orig, **k: object) -> np.ndarray:
                    return _orig(*a, **k, device=args.fast_device)  # type: ignore[operator]

                protocols.fit_batched = pinned  # type: ignore[assignment]
            ctx = protocols.Context(encoder, Path(tmp), seed=1234, fast=mode == "fast", jobs=args.jobs)
            t0 = time.perf_counter()
            result = protocols.binary(ctx, "mr")
            seconds = time.perf_counter() - t0
            device = (
                (args.fast_device or ("cuda" if torch.cuda.is_available() else "cpu"))
                if mode == "fast"
                else "cpu"
            )
            row = {
                "mode": mode,
                "device": device,
                "jobs": args.jobs if mode == "faithful" else None,
                "seconds": round(seconds, 1),
                "acc": round(result["acc"], 2),
                "C": result["C"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    info = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "sentences": args.sentences,
        "dim": UNI + BI,
        "one_liblinear_fit_s": round(one_fit, 1),
        "runs": rows,
    }
    print(f"\n{'mode':9} {'device':7} {'jobs':>4} {'seconds':>9} {'x one fit':>10} {'MR acc':>7}")
    for r in rows:
        print(
            f"{r['mode']:9} {r['device']:7} {r['jobs'] or '':>4} {r['seconds']:>9} "
            f"{r['seconds'] / one_fit:>10.1f} {r['acc']:>7}"
        )
    if args.json:
        args.json.write_text(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
