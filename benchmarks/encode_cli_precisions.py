"""``lnserve encode --precision P`` end to end, each precision against fp32 in the same run (issue 34).

Run: ``.venv/bin/python benchmarks/encode_cli_precisions.py [--sentences 4096] [--rounds 3]``.

The model is a random-weight LN-GRU order-embedding at the published dims (300 -> 1024,
``benchmarks/http_load.published_size_model``); the sentences are 13 words each (the COCO caption mean),
encoded with ``--batch-size 128``. Each round runs every precision once, in turn, as a fresh CLI process; a
precision's rate is sentences over the time its ``Engine.encode`` call took inside that process (a wrapper
times the call: interpreter start, model load and writing the output are left out). Each precision keeps
its best round; ratios are against fp32's. ``int8-calibrated`` is int8 on a copy of the model that ``lnserve
calibrate`` measured on the same sentences (the calibrated graph's cost).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.http_load import published_size_model  # noqa: E402
from lnserve.app.runtime.cpu_features import cpu_flags, int8_scheme_for, isa_summary  # noqa: E402

# Times Engine.encode inside a real CLI run: the same command line, with the encode call wrapped.
WRAPPER = """
import json, sys, time
from lnserve.app.runtime import engine as engine_module
from lnserve.app.cli import main

spent = []
encode = engine_module.Engine.encode
def timed(self, *args, **kwargs):
    t0 = time.perf_counter()
    try:
        return encode(self, *args, **kwargs)
    finally:
        spent.append(time.perf_counter() - t0)
engine_module.Engine.encode = timed
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
sys.stderr.write("ENCODE_SECONDS " + json.dumps(sum(spent)) + "\\n")
"""


def run_cli(model: Path, sentences: Path, out: Path, precision: str) -> float:
    args = ["encode", str(model), "--input", str(sentences), "--output", str(out)]
    args += ["--batch-size", "128", "--precision", precision]
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1])
    line = next(x for x in proc.stderr.splitlines() if x.startswith("ENCODE_SECONDS "))
    return float(json.loads(line.split(" ", 1)[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,int8,int8-calibrated,bf16")
    args = parser.parse_args()
    flags = cpu_flags()
    print(
        f"load average {os.getloadavg()[0]:.2f} | cpu_count {os.cpu_count()} | {isa_summary(flags)} | "
        f"int8 scheme {int8_scheme_for(flags)} | the CLI's threads: min(cpu_count, 8)"
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = published_size_model(tmp / "model")
        vocab = [
            w for w in json.loads((model / "vocab.json").read_text(encoding="utf-8")) if w.startswith("w")
        ]
        rng = np.random.default_rng(0)
        lines = [" ".join(rng.choice(vocab, size=13)) for _ in range(args.sentences)]
        (tmp / "s.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        models = {p: model for p in args.precisions.split(",")}
        if "int8-calibrated" in models:
            models["int8-calibrated"] = calibrated = Path(shutil.copytree(model, tmp / "model-calibrated"))
            cli = [sys.executable, "-c", "from lnserve.app.cli import main; main()"]
            args_ = ["calibrate", str(calibrated), "--texts", str(tmp / "s.txt")]
            subprocess.run([*cli, *args_], capture_output=True, check=True)
        best: dict[str, float] = {}
        skipped: dict[str, str] = {}
        for _ in range(args.rounds):
            for p in args.precisions.split(","):
                if p in skipped:
                    continue
                try:
                    seconds = run_cli(models[p], tmp / "s.txt", tmp / f"{p}.npy", p.partition("-")[0])
                except RuntimeError as exc:
                    skipped[p] = str(exc)
                    continue
                best[p] = min(best.get(p, float("inf")), seconds)
    base = best.get("fp32")
    print(f"{'precision':16} {'sentences/s':>12} {'vs fp32':>8}   (B=128, T=13, {args.sentences} sentences)")
    for p, seconds in best.items():
        ratio = f"{base / seconds:7.2f}x" if base else "-"
        print(f"{p:16} {args.sentences / seconds:12.0f} {ratio:>8}")
    for p, why in skipped.items():
        print(f"{p:16} not run: {why}")


if __name__ == "__main__":
    main()
