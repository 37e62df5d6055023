"""Server start time and resident memory with a full-size skip-thoughts model (combine-skip).

Builds a synthetic artifact with the published shapes (uni-skip GRU 620 -> 2400, bi-skip GRU 620 -> 2 x 1200,
two 930,913 x 620 float32 word tables of ~2.3 GB each, a 930,913-word dictionary) in a temporary directory,
then starts a real ``lnserve serve --models DIR`` process and measures:

* start: seconds from process launch until ``/ready`` answers 200 (model loaded and warmed up);
* RssAnon (private memory: heap, weights, sessions) from ``/proc/PID/status`` when ready, and after a few
  ``/encode`` requests; RssFile shows the table pages the requests touched (mapped, shared, evictable);
* whether both tables are memory-mapped (``/proc/PID/maps``).

Baseline, same run: a process that only imports the modules the server needs, launched and measured the same
way. Targets (issue 13): start <= 5 s, RssAnon <= 1 GB. The machine may be shared: the server is started
``--starts`` times and the table shows the best and the median; the load average is printed.

    python benchmarks/skipthoughts_fullsize.py [--rows 930913] [--starts 3] [--workdir /tmp] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's lnserve, not an installed one
from lnserve.converters import CONVERTER_VERSION  # noqa: E402
from lnserve.converters.artifact import finish_manifest, save_weights, staging_dir, write_json  # noqa: E402

DIM_WORD, UNI_DIM, BI_DIM, PUBLISHED_ROWS = 620, 2400, 1200, 930_913
WORDS = "a dog sitting on the table with man woman riding horse street two people are playing in park".split()
IMPORTS = (
    "import uvicorn, lnserve.app.cli, lnserve.app.commands.serve, lnserve.app.http.main, "
    "lnserve.app.runtime.engine, lnserve.app.runtime.onnx_backend"
)
SENTENCES = [
    "a dog sitting on the table",
    "two people are playing in the park with a dog",
    "a man riding a horse on the street",
    "a woman sitting",
]


def write_table(path: Path, rows: int, seed: int) -> None:
    """A (rows, 620) float32 .npy written through a memory map, one 64k-row block at a time (a random block
    reused with a per-block offset: generating 577M normals would dominate the build)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((65536, DIM_WORD), dtype=np.float32) * np.float32(0.1)
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, DIM_WORD))
    for i, start in enumerate(range(0, rows, 65536)):
        n = min(65536, rows - start)
        np.add(base[:n], np.float32(i * 1e-4), out=table[start : start + n])
    table.flush()
    del table


def build_artifact(out: Path, rows: int) -> dict[str, Any]:
    """A combine-skip artifact in the converter's format, written with the converter's own helpers."""
    rng = np.random.default_rng(13)
    words = ["<eos>", "UNK", *WORDS, *(f"w{i}" for i in range(rows - 2 - len(WORDS)))]
    tensors = {}
    for module, dim in (("uni", UNI_DIM), ("bi_fwd", BI_DIM), ("bi_bwd", BI_DIM)):
        tensors[f"{module}.cell.weight_ih"] = rng.uniform(-0.05, 0.05, (3 * dim, DIM_WORD)).astype(np.float32)
        tensors[f"{module}.cell.bias_ih"] = np.zeros(3 * dim, dtype=np.float32)
        tensors[f"{module}.cell.weight_hh"] = rng.uniform(-0.05, 0.05, (3 * dim, dim)).astype(np.float32)
    with staging_dir(out) as tmp:
        write_table(tmp / "uni_table.npy", rows, 1)
        write_table(tmp / "bi_table.npy", rows, 2)
        save_weights(tmp, tensors)
        write_json(tmp / "dictionary.json", {"words": words})
        manifest = {
            "name": "combine-skip-synthetic",
            "family": "skip-thoughts",
            "demo": False,
            "description": "synthetic weights and tables at the published shapes (benchmark)",
            "converter_version": CONVERTER_VERSION,
            "parts": {
                "uni": {"cell": "gru", "dim": UNI_DIM, "table": "uni_table.npy"},
                "bi": {"cell": "gru", "dim": BI_DIM, "table": "bi_table.npy"},
            },
            "dims": {"dim_word": DIM_WORD, "n_table_rows": rows, "output_dim": UNI_DIM + 2 * BI_DIM},
            "tokenizer": "treebank",
            "defaults": {"eos": False, "normalize": True},
            "sources": {},
            "notes": [],
        }
        return finish_manifest(tmp, manifest)


def proc_status(pid: int) -> dict[str, int]:
    """RssAnon / RssFile / VmRSS / VmHWM of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far: robust to other load on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mapped_tables(pid: int, art: Path) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [name for name in ("uni_table.npy", "bi_table.npy") if str(art / name) in maps]


def baseline() -> tuple[float, dict[str, int]]:
    """Launch-to-imported time and memory of a process that only imports the server's modules."""
    code = f"{IMPORTS}; import sys; sys.stdout.write('ok\\n'); sys.stdout.flush(); sys.stdin.read()"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.readline()
    elapsed = time.monotonic() - t0
    status, cpu = proc_status(proc.pid), cpu_seconds(proc.pid)
    proc.stdin.close()
    proc.wait(30)
    return elapsed, status, cpu


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_once(art: Path, work: Path, timeout: float) -> dict[str, Any]:
    """Start a server, time /ready, measure memory before and after a few /encode requests, stop it."""
    port = free_port()
    env = {**os.environ, "LNSERVE_GALLERIES_DIR": str(work / "galleries"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", "from lnserve.app.cli import main; main()", "serve", "--models", str(art)]
    log_path = work / f"server-{port}.log"
    with log_path.open("wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=30.0) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"not ready after {timeout} s:\n{log_path.read_text()[-3000:]}")
                try:
                    if client.get(f"{url}/ready", timeout=1.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
            start_s = time.monotonic() - t0
            ready, cpu_s = proc_status(proc.pid), cpu_seconds(proc.pid)
            for i in range(8):
                body = {"sentences": [SENTENCES[(i + j) % len(SENTENCES)] for j in range(1 + 4 * i)]}
                resp = client.post(f"{url}/encode", json=body)
                resp.raise_for_status()
                vectors = np.asarray(resp.json()["vectors"], dtype=np.float32)
                assert vectors.shape == (len(body["sentences"]), UNI_DIM + 2 * BI_DIM)
                assert np.isfinite(vectors).all()
            served = proc_status(proc.pid)
            tables = mapped_tables(proc.pid, art)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"start_s": start_s, "cpu_s": cpu_s, "ready": ready, "served": served, "tables": tables}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=PUBLISHED_ROWS)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="parent of the temporary directory")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--keep", action="store_true", help="keep the artifact (for profiling); default: remove")
    ap.add_argument(
        "--artifact", type=Path, default=None, help="measure this artifact (kept) instead of building"
    )
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")

    work = Path(tempfile.mkdtemp(prefix="lnserve-st-fullsize-", dir=args.workdir))
    art = args.artifact.resolve() if args.artifact else work / "combine-skip"
    try:
        if args.artifact is None:
            t0 = time.monotonic()
            manifest = build_artifact(art, args.rows)
            size = sum(f["bytes"] for f in manifest["files"].values())
            print(f"built {art} ({size / 1e9:.2f} GB) in {time.monotonic() - t0:.1f} s")
        base_runs = [baseline() for _ in range(args.starts)]
        runs = [serve_once(art, work, args.timeout) for _ in range(args.starts)]
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    mib = 2**20
    starts = [r["start_s"] for r in runs]
    base_s = [b[0] for b in base_runs]
    rows_n = (
        json.loads((art / "manifest.json").read_text())["dims"]["n_table_rows"]
        if args.artifact
        else args.rows
    )
    print(f"\ncombine-skip, {rows_n} x {DIM_WORD} tables x 2; best (median) of {args.starts} starts")
    print(f"{'':32} {'server':>17} {'imports only':>17} {'target':>9}")
    print(
        f"{'start to /ready (s)':32} {min(starts):8.2f} ({statistics.median(starts):6.2f}) "
        f"{min(base_s):8.2f} ({statistics.median(base_s):6.2f}) {'<= 5':>9}"
    )
    cpus, base_cpu = [r["cpu_s"] for r in runs], [b[2] for b in base_runs]
    print(
        f"{'CPU seconds until then':32} {min(cpus):8.2f} ({statistics.median(cpus):6.2f}) "
        f"{min(base_cpu):8.2f} ({statistics.median(base_cpu):6.2f})"
    )
    rows = (
        ("RssAnon when ready (MiB)", "ready", "RssAnon", "<= 1024"),
        ("RssAnon after 8 /encode (MiB)", "served", "RssAnon", "<= 1024"),
        ("RssFile after 8 /encode (MiB)", "served", "RssFile", ""),
        ("VmHWM peak RSS (MiB)", "served", "VmHWM", ""),
    )
    for label, when, key, target in rows:
        vals = [r[when][key] / mib for r in runs]
        bvals = [b[1][key] / mib for b in base_runs]
        print(
            f"{label:32} {min(vals):8.0f} ({statistics.median(vals):6.0f}) "
            f"{min(bvals):8.0f} ({statistics.median(bvals):6.0f}) {target:>9}"
        )
    anon = max(r["served"]["RssAnon"] for r in runs) / mib - min(b[1]["RssAnon"] for b in base_runs) / mib
    print(f"RssAnon above the imports-only baseline (worst run): {anon:.0f} MiB")
    print(f"tables memory-mapped in every run: {all(len(r['tables']) == 2 for r in runs)}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
