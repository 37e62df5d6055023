"""The fidelity contract of the approximate precision profiles (int8, bf16) against fp32, in one run.

Run: ``.venv/bin/python benchmarks/precision_contract.py [--precisions int8,bf16] [--json out.json]``
(about 1-2 min on 2 cores). It prints, for each precision beside fp32 of the same run:

1. per-vector cosine to fp32 (minimum and mean) on every legacy fixture model (``tests/fixtures/legacy``,
   converted here) and on a published-size random LN-GRU order-embedding (300 -> 1024, 1,024 sentences of
   4-40 words);
2. the order-embedding retrieval protocol (``lnserve eval``) on the demo model's held-out split (the
   synthetic world's 1,000 test images and 5,000 captions, ``lnserve train world``): R@1/5/10 both ways and
   the share of queries whose top-1 is fp32's top-1;
3. ``lnserve eval skip-thoughts --fast`` on the synthetic sets of the tests (``tests/support/eval_sets``),
   with the skip-thoughts LN-GRU fixture and with the demo model: every score against fp32's.

Bars (issue 34): every vector's cosine >= 0.999; R@K within 0.5 points; top-1 agreement >= 98%. The
skip-thoughts scores have no bar of their own (the sets are tiny; a flipped test item moves a score by
points): they are printed beside fp32's. A precision this machine cannot run (bf16 without AVX-512 BF16 or
AMX, or without torch) is reported as not run, with the reason. Exit status 1 when a bar is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.http_load import published_size_model  # noqa: E402
from lnserve.app.runtime.cpu_features import cpu_flags, int8_scheme_for, isa_summary  # noqa: E402
from lnserve.app.runtime.engine import Engine  # noqa: E402
from lnserve.app.runtime.evaluation import i2t, t2i  # noqa: E402
from lnserve.converters.int8_calibration import SECTION, peaks_file  # noqa: E402
from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding  # noqa: E402
from lnserve.converters.skip_thoughts import convert_skip_thoughts  # noqa: E402
from lnserve.errors import LnserveError  # noqa: E402
from tests.support import eval_sets  # noqa: E402

LEGACY = ROOT / "tests" / "fixtures" / "legacy"
OE_FIXTURES = (
    "oe_order_gru",
    "oe_symmetric_gru",
    "oe_order_lngru",
    "oe_order_rlngru",
    "oe_order_rms_as_lngru",
)
ST_FIXTURES = ("skipthoughts_gru", "skipthoughts_lngru")
COSINE_BAR, RECALL_BAR, TOP1_BAR = 0.999, 0.5, 98.0
DEMO = ROOT / "app" / "demo_model"


@dataclass
class Report:
    rows: list[dict[str, Any]] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def bar(self, ok: bool, what: str) -> str:
        if not ok:
            self.missed.append(what)
        return "ok" if ok else "MISSED"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from lnserve.app.cli import main; main()", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "120"}
    )


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def open_engine(path: Path, spec: str) -> Engine | str:
    """The engine for ``precision[:int8 scheme]``, or why this machine cannot run it (one line)."""
    precision, _, scheme = spec.partition(":")
    options = {"int8_scheme": scheme} if scheme else {}
    try:
        return Engine.open(path, precision=precision, **options)
    except (LnserveError, ImportError) as exc:
        return str(exc).splitlines()[0]


def fixture_models(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    """Every legacy fixture converted, with the sentences the original code encoded."""
    inputs = json.loads((LEGACY / "inputs.json").read_text(encoding="utf-8"))
    out: dict[str, tuple[Path, list[str]]] = {}
    for name in OE_FIXTURES:
        write_order_embedding(read_order_embedding(LEGACY / "order_embedding" / name), tmp / name, name=name)
        out[name] = (tmp / name, inputs["order_embedding"]["captions"])
    for name in ST_FIXTURES:
        src = LEGACY / name
        convert_skip_thoughts(
            uni=src / "uni_skip.npz", bi=src / "bi_skip.npz", tables=src, out=tmp / name, name=name
        )
        out[name] = (tmp / name, inputs["skipthoughts"]["sentences"])
    return out


def random_sentences(model: Path, n: int = 1024, seed: int = 0) -> list[str]:
    vocab = json.loads((model / "vocab.json").read_text(encoding="utf-8"))
    words = [w for w in vocab if w.startswith("w")]
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=int(rng.integers(4, 41)))) for _ in range(n)]


def vector_table(models: dict[str, tuple[Path, list[str]]], precision: str, report: Report) -> None:
    print(f"\n1. per-vector cosine to fp32 ({precision}; bar: every vector >= {COSINE_BAR})")
    print(f"{'model':32} {'vectors':>7} {'min':>9} {'mean':>9}  bar")
    for name, (path, texts) in models.items():
        exact, approx = open_engine(path, "fp32"), open_engine(path, precision)
        if isinstance(approx, str) or isinstance(exact, str):
            print(f"{name:32} not run: {approx if isinstance(approx, str) else exact}")
            report.rows.append({"table": "vectors", "model": name, "precision": precision, "not_run": approx})
            continue
        c = cosines(exact.encode_sentences(texts), approx.encode_sentences(texts))
        verdict = report.bar(bool(c.min() >= COSINE_BAR), f"{precision} cosine on {name}")
        print(f"{name:32} {len(c):7d} {c.min():9.6f} {c.mean():9.6f}  {verdict}")
        report.rows.append(
            {
                "table": "vectors",
                "model": name,
                "precision": precision,
                "n": len(c),
                "min": c.min(),
                "mean": c.mean(),
            }
        )


def uncalibrated_copy(model: Path, out: Path) -> Path:
    """``model`` without its int8 calibration: the fixed state scale of ``onnx_graph.gemms``."""
    shutil.copytree(model, out, ignore=shutil.ignore_patterns("*.py", "__pycache__", "int8"))
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"].pop(peaks_file(manifest), None)
    manifest.pop(SECTION, None)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def retrieval_table(world: Path, precision: str, report: Report, demo: Path = DEMO, label: str = "") -> None:
    print(
        f"\n2. demo model{label}, held-out split, caption->image (t2i) and image->caption (i2t), "
        f"{precision} vs fp32"
    )
    texts = (world / "test_caps.txt").read_text(encoding="utf-8").splitlines()
    feats = np.load(world / "test_ims.npy")
    results: dict[str, Any] = {}
    for p in ("fp32", precision):
        engine = open_engine(demo, p)
        if isinstance(engine, str):
            print(f"not run: {engine}")
            return
        errs = engine.score(engine.encode_sentences(texts), engine.encode_images(feats))  # (5N, N)
        results[p] = {"t2i": t2i(errs).as_dict(), "i2t": i2t(errs).as_dict(), "errs": errs}
    print(f"{'direction':10} {'precision':9} {'R@1':>7} {'R@5':>7} {'R@10':>7} {'top-1 agrees':>13}  bar")
    agree = {
        "t2i": 100 * np.mean(results["fp32"]["errs"].argmin(1) == results[precision]["errs"].argmin(1)),
        "i2t": 100 * np.mean(results["fp32"]["errs"].argmin(0) == results[precision]["errs"].argmin(0)),
    }
    for direction in ("t2i", "i2t"):
        base = results["fp32"][direction]
        print(f"{direction:10} {'fp32':9} {base['r1']:7.2f} {base['r5']:7.2f} {base['r10']:7.2f}")
        got = results[precision][direction]
        deltas = [abs(got[k] - base[k]) for k in ("r1", "r5", "r10")]
        ok = max(deltas) <= RECALL_BAR and agree[direction] >= TOP1_BAR
        verdict = report.bar(ok, f"{precision} retrieval {direction}{label}") if not label else "(shown)"
        print(
            f"{'':10} {precision:9} {got['r1']:7.2f} {got['r5']:7.2f} {got['r10']:7.2f} "
            f"{agree[direction]:12.2f}%  {verdict} (max |dR@K| {max(deltas):.2f})"
        )
        report.rows.append(
            {
                "table": "retrieval",
                "direction": direction,
                "precision": precision,
                "demo": label.strip(" ()") or "as shipped",
                "fp32": base,
                "got": got,
                "top1_agreement": agree[direction],
            }
        )


def skip_thoughts_table(models: dict[str, Path], data: Path, precision: str, report: Report) -> None:
    print(f"\n3. lnserve eval skip-thoughts --fast on the synthetic sets, {precision} vs fp32")
    tasks = "mr,cr,subj,mpqa,trec,msrp,sick-r,sick-e,sts14"
    for name, path in models.items():
        scores: dict[str, Any] = {}
        for p in ("fp32", precision):
            try:
                args = ["--model", str(path), "--task", tasks, "--data", str(data), "--precision", p]
                proc = cli("eval", "skip-thoughts", *args, "--fast", "--json", "-")
            except subprocess.CalledProcessError as exc:
                print(f"{name}: {p} not run: {exc.stderr.strip().splitlines()[-1]}")
                break
            scores[p] = _task_scores(json.loads(proc.stdout))
        if len(scores) < 2:
            continue
        print(
            f"{name}: "
            + ", ".join(f"{t} {scores['fp32'][t]:.2f} -> {scores[precision][t]:.2f}" for t in scores["fp32"])
        )
        report.rows.append({"table": "skip-thoughts", "model": name, "precision": precision, **scores})


def _task_scores(result: dict[str, Any]) -> dict[str, float]:
    """The headline number of each task (accuracy, or Pearson r for relatedness)."""
    out: dict[str, float] = {}
    for task, r in result["tasks"].items():
        for key in ("acc", "r", "pearson"):  # accuracy (classification), Pearson r (SICK-R, STS14)
            if isinstance(r.get(key), (int, float)):
                out[task] = float(r[key])
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--precisions",
        default="int8,int8:pair-safe,int8:full,bf16",
        help="comma-separated profiles to check; int8 alone: the scheme this CPU gets",
    )
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--no-skip-thoughts", action="store_true", help="skip table 3 (the slowest)")
    args = parser.parse_args()
    report = Report()
    flags = cpu_flags()
    print(f"load average {os.getloadavg()[0]:.2f}, cpu count {os.cpu_count()}, {isa_summary(flags)}")
    print(f"int8 on this CPU: the {int8_scheme_for(flags)} activation scheme (onnx_graph.gemms)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        models = fixture_models(tmp / "fixtures")
        published = published_size_model(tmp / "published")
        models["published-size lngru 300->1024"] = (published, random_sentences(published))
        cli("train", "world", "--out", str(tmp / "world"))
        data = eval_sets.write_all(tmp / "sets")
        for precision in args.precisions.split(","):
            vector_table(models, precision, report)
            retrieval_table(tmp / "world", precision, report)
            if precision.startswith("int8"):  # the shipped demo is calibrated: what calibration brings
                plain = tmp / "demo-uncalibrated"
                if not plain.exists():
                    uncalibrated_copy(DEMO, plain)
                retrieval_table(tmp / "world", precision, report, plain, " (uncalibrated, no bar)")
            if not args.no_skip_thoughts and ":" not in precision:  # the CLI runs this CPU's scheme
                st = {"skipthoughts_lngru": models["skipthoughts_lngru"][0], "demo": DEMO}
                skip_thoughts_table(st, data, precision, report)
    if args.json:
        args.json.write_text(json.dumps(report.rows, indent=1, default=float) + "\n", encoding="utf-8")
    print("\nbars: " + ("all met" if not report.missed else "MISSED: " + "; ".join(report.missed)))
    sys.exit(1 if report.missed else 0)


if __name__ == "__main__":
    main()
