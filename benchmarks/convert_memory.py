"""Peak memory of ``lnserve convert skip-thoughts`` on a synthetic legacy word table.

Writes a ROWS x 620 ``btable.npy`` in the exact Python 2 object-array format (see
``tests/support/legacy_format.py``, byte-identical to the public fixtures), a matching ``dictionary.txt``
and a small ``bi_skip.npz`` / ``.npz.pkl``, converts them with the real CLI in a subprocess, and compares the
child's peak RSS with the table size. Baseline: the peak RSS of a child that only imports the same modules.
Target (issue 2): peak RSS <= 1.25 x table bytes.

    python benchmarks/convert_memory.py [--rows 200000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.legacy_format import write_legacy_table  # noqa: E402

DIM_WORD, DIM, SEED, BLOCK = 620, 8, 20240611, 10_000
IMPORTS = (
    "import lnserve.app.cli, lnserve.app.commands.convert, lnserve.converters.skip_thoughts, rich.progress"
)


def table_rows(n: int) -> Iterator[np.ndarray]:
    """Deterministic rows; every 7th has shape (1, 620) like the vocabulary-expansion rows."""
    rng = np.random.default_rng(SEED)
    for start in range(0, n, BLOCK):
        block = rng.standard_normal((min(BLOCK, n - start), DIM_WORD), dtype=np.float32)
        for j, row in enumerate(block):
            yield row[None] if (start + j) % 7 == 0 else row


def write_inputs(work: Path, n: int) -> None:
    rng = np.random.default_rng(SEED + 1)
    words = ["<eos>", "UNK", *(f"w{i}" for i in range(n - 2))]
    (work / "dictionary.txt").write_bytes("".join(w + "\n" for w in words).encode("utf-8"))
    write_legacy_table(work / "btable.npy", table_rows(n), n)
    params = {}
    for prefix in ("encoder", "encoder_r"):
        for name, shape in (("W", (DIM_WORD, 2 * DIM)), ("b", (2 * DIM,)), ("U", (DIM, 2 * DIM))):
            params[f"{prefix}_{name}"] = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
        for name, shape in (("Wx", (DIM_WORD, DIM)), ("bx", (DIM,)), ("Ux", (DIM, DIM))):
            params[f"{prefix}_{name}"] = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
    np.savez(work / "bi_skip.npz", **params)
    options = {"dim": DIM, "dim_word": DIM_WORD, "encoder": "gru", "n_words_src": 20}
    with (work / "bi_skip.npz.pkl").open("wb") as f:
        pickle.dump(options, f, protocol=0)


def peak_rss(args: list[str]) -> tuple[int, float]:
    """Run a child; return (its peak RSS in bytes, wall seconds) via wait4's rusage."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed ({proc.returncode}): {proc.stderr.read().decode()}")  # type: ignore[union-attr]
    return usage.ru_maxrss * 1024, time.perf_counter() - t0


def verify(out: Path, n: int) -> str:
    """The converted table is memory-mapped on load and holds the same rows."""
    from lnserve.converters.artifact import read_artifact

    table = read_artifact(out).table("bi_table.npy")
    assert isinstance(table, np.memmap), type(table)
    assert table.shape == (n, DIM_WORD) and table.dtype == np.float32
    for i, row in enumerate(table_rows(min(n, BLOCK))):
        if i % 997 == 0 or i == BLOCK - 1:
            assert np.array_equal(table[i], row.reshape(-1)), f"row {i} differs"
    last = list(table_rows(n))[-1] if n <= BLOCK else None
    if last is not None:
        assert np.array_equal(table[-1], last.reshape(-1))
    return f"{type(table).__name__} {table.shape} {table.dtype}, rows match"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workdir", type=Path, default=None)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=ns.workdir) as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        write_inputs(work, ns.rows)
        print(f"wrote synthetic inputs in {time.perf_counter() - t0:.1f}s")
        table_bytes = ns.rows * DIM_WORD * 4
        base, _ = peak_rss([sys.executable, "-c", IMPORTS])
        out = work / "artifact"
        cli = [sys.executable, "-c", "from lnserve.app.cli import main; main()", "convert", "skip-thoughts"]
        peak, secs = peak_rss(
            [*cli, "--bi", str(work / "bi_skip.npz"), "--tables", str(work), "--out", str(out)]
        )
        check = verify(out, ns.rows)
        mib = 1 << 20
        rows = [
            ("table (float32 data)", f"{table_bytes / mib:,.1f} MiB"),
            ("legacy btable.npy on disk", f"{(work / 'btable.npy').stat().st_size / mib:,.1f} MiB"),
            ("baseline: imports only, peak RSS", f"{base / mib:,.1f} MiB"),
            ("convert skip-thoughts, peak RSS", f"{peak / mib:,.1f} MiB ({secs:.1f}s)"),
            ("ratio peak / table", f"{peak / table_bytes:.3f}"),
            ("ratio (peak - baseline) / table", f"{(peak - base) / table_bytes:.3f}"),
            ("target", "<= 1.25"),
            ("converted table on load", check),
        ]
        width = max(len(k) for k, _ in rows)
        print(f"rows = {ns.rows:,} x {DIM_WORD}")
        for k, v in rows:
            print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
