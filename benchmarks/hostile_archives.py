"""Time and peak memory of ``lnserve convert order-embedding`` on .npz archives carrying zip bombs.

Builds the public order-embedding fixture as is (the baseline, measured in the same run), then with an
extra, unneeded member that inflates to 2 GiB (2 MB on disk), and with a needed member (``encoder_W``)
whose ``.npy`` header declares (12, 32) float32 but whose stream inflates to 8 GiB. Each conversion runs
the real CLI in a subprocess; the table reports wall time, peak RSS (wait4) and the ratio to the
baseline. Issue 15 measured 14 s and 2.2 GB for the 2 GiB member and an internal MemoryError for 8 GiB.

    python benchmarks/hostile_archives.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import forged  # noqa: E402

OE_DIR = ROOT / "tests" / "fixtures" / "legacy" / "order_embedding"
GIB = 1 << 30
CLI = [sys.executable, "-c", "from lnserve.app.cli import main; main()", "convert", "order-embedding"]


def _prefix(work: Path, name: str) -> Path:
    """A copy of the fixture in ``work/name`` (``name`` is the builder's function name)."""
    (work / name).mkdir()
    for ext in ("npz", "pkl"):
        shutil.copy(OE_DIR / f"oe_order_gru.{ext}", work / name / f"oe_order_gru.{ext}")
    return work / name / "oe_order_gru"


def baseline(work: Path) -> Path:
    return _prefix(work, "baseline")


def unneeded_2gib(work: Path) -> Path:
    prefix = _prefix(work, "unneeded_2gib")
    npz = Path(f"{prefix}.npz")
    bomb = forged.deflate_bomb("junk.npy", forged.npy_header((2 * GIB // 4,)), 2 * GIB, crc=0)
    forged.write_zip(npz, [*forged.npz_members(npz), bomb])
    return prefix


def needed_8gib(work: Path) -> Path:
    prefix = _prefix(work, "needed_8gib")
    npz = Path(f"{prefix}.npz")
    members = [m for m in forged.npz_members(npz) if m.name != "encoder_W.npy"]
    bomb = forged.deflate_bomb("encoder_W.npy", forged.npy_header((12, 32)), 8 * GIB, crc=0)
    forged.write_zip(npz, [*members, bomb])
    return prefix


CASES: list[tuple[str, Callable[[Path], Path]]] = [
    ("baseline: fixture as is", baseline),
    ("+ unneeded member inflating to 2 GiB", unneeded_2gib),
    ("needed member inflating to 8 GiB", needed_8gib),
]


def run(prefix: Path, out: Path) -> tuple[float, int, str]:
    """One conversion: (wall seconds, peak RSS bytes, outcome)."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*CLI, str(prefix), "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    secs = time.perf_counter() - t0
    err = proc.stderr.read().decode().strip().splitlines() if proc.stderr else []  # type: ignore[union-attr]
    code = os.waitstatus_to_exitcode(status)
    last = (err[-1] if err else "").replace(str(prefix.parent), "DIR")
    outcome = "converted" if code == 0 else f"exit {code}: {last[:110]}"
    return secs, usage.ru_maxrss * 1024, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.make:  # build the inputs in a child, so that they do not count in the measured peaks
        for _, make in CASES:
            make(ns.make)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, __file__, "--make", str(work)], check=True)
        rows = []
        for label, make in CASES:
            prefix = work / make.__name__ / "oe_order_gru"
            size = Path(f"{prefix}.npz").stat().st_size
            runs = [run(prefix, work / "out") for _ in range(ns.repeat)]
            secs = statistics.median(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            rows.append((label, size, secs, peak, runs[-1][2]))
    base_secs, base_peak = rows[0][2], rows[0][3]
    mib = 1 << 20
    print(f"median of {ns.repeat} runs; ratios are to the baseline measured in this run")
    print(f"{'case':<38} {'.npz':>9} {'wall':>7} {'x base':>7} {'peak RSS':>10} {'x base':>7}  outcome")
    for label, size, secs, peak, outcome in rows:
        print(
            f"{label:<38} {size / mib:>7.2f}MB {secs:>6.2f}s {secs / base_secs:>7.2f} "
            f"{peak / mib:>8.1f}MB {peak / base_peak:>7.2f}  {outcome}"
        )


if __name__ == "__main__":
    main()
