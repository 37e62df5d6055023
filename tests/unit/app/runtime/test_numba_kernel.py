"""The numba kernel's speed variants (block shape per vector width, the subtraction's form, AVX2 vs AVX-512
code) give the canonical scores bit for bit: a variant may only change the speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from lnserve.app.runtime import numba_kernel as nk
from lnserve.app.runtime.retrieval import NumpyKernel

MODES = {"caption": nk.CAPTION, "image": nk.IMAGE, "dot": nk.DOT}
VARIANTS = [(4, 4, False), (2, 2, True), (2, 2, False), (3, 4, True), (4, 2, True), (1, 3, False)]
_BUILT: dict[tuple[int, int, bool], object] = {}  # one compilation per variant for all dims


def _data(seed: int, dim: int, n_queries: int, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Random rows with planted ties: duplicated items, a query equal to an item, exact zeros."""
    rng = np.random.default_rng(seed)
    items = np.abs(rng.standard_normal((n_items, dim))).astype(np.float32)
    queries = np.abs(rng.standard_normal((n_queries, dim))).astype(np.float32)
    items[n_items // 2 : n_items // 2 + 5] = items[1]
    queries[2] = items[1]
    queries[3, ::3] = 0
    return queries, items


def _scores(scan, queries: np.ndarray, items: np.ndarray, mode: int) -> np.ndarray:
    out = np.full((len(queries), len(items)), np.nan, dtype=np.float32)
    scan(queries, items, out, 0, len(items), 8, mode, nk._ONE)  # tiles of 8 rows: block tails everywhere
    return out


@pytest.mark.parametrize("dim", [1024 + 5, 37, 16, 5])
def test_every_block_shape_and_subtraction_gives_identical_bits(dim: int) -> None:
    queries, items = _data(dim, dim, 11, 43)  # 11 queries, 43 rows: full blocks plus remainders
    for name, mode in MODES.items():
        want = _scores(nk._scan, queries, items, mode)  # the service's path
        ref = NumpyKernel(threads=1)
        canon = ref.dot(queries, items) if name == "dot" else ref.order_violation(queries, items, name)
        assert np.array_equal(want.view(np.int32), canon.view(np.int32)), name
        for shape in VARIANTS:
            if shape not in _BUILT:
                _BUILT[shape] = nk.build_scan(*shape)
            got = _scores(_BUILT[shape], queries, items, mode)
            assert np.array_equal(got.view(np.int32), want.view(np.int32)), (name, shape)


def test_block_shapes_are_chosen_per_vector_width() -> None:
    assert nk.ISA in nk.BLOCK_SHAPES
    assert nk.BLOCK_SHAPES[nk.ISA] == (nk.QUERY_BLOCK, nk.ROW_BLOCK, nk.FMA_SUB)


_CHILD = """
import json, re, sys
import numpy as np
from lnserve.app.runtime import numba_kernel as nk
d = np.load(sys.argv[1])
out = {}
for name, mode in {"caption": nk.CAPTION, "image": nk.IMAGE, "dot": nk.DOT}.items():
    s = np.empty((len(d["q"]), len(d["v"])), dtype=np.float32)
    nk.scan(d["q"], d["v"], s, 0, len(d["v"]), 8, mode)
    out[name] = s.view(np.int32).tolist()
asm = "".join(nk._scan.inspect_asm().values()) if nk._scan.signatures else ""
print(json.dumps({"isa": nk.ISA, "shape": [nk.QUERY_BLOCK, nk.ROW_BLOCK, nk.FMA_SUB],
                  "zmm": len(re.findall("%zmm", asm)), "scores": out}))
"""


def test_avx2_code_gives_the_avx512_bits(tmp_path: Path) -> None:
    """The kernel compiled for AVX2 (8-lane registers, its own block shape) in a fresh process scores
    bit-identically to this process's code (AVX-512 where the host has it)."""
    host = llvm.get_host_cpu_features().flatten().split(",")
    if "+avx2" not in host:
        pytest.skip("not an x86 host with AVX2")
    queries, items = _data(7, 1024 + 3, 9, 37)
    np.savez(tmp_path / "d.npz", q=queries, v=items)
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["NUMBA_CPU_FEATURES"] = ",".join(f for f in host if "avx512" not in f and not f.startswith("+amx"))
    env.pop("NUMBA_DISABLE_JIT", None)
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "d.npz")], env=env, capture_output=True, text=True,
        timeout=600, check=True,
    )  # fmt: skip
    child = json.loads(run.stdout.strip().splitlines()[-1])
    assert child["isa"] == "avx2" and child["shape"] == list(nk.BLOCK_SHAPES["avx2"])
    assert child["zmm"] == 0
    for name, mode in MODES.items():
        want = _scores(nk._scan, queries, items, mode)
        assert np.array_equal(np.asarray(child["scores"][name], dtype=np.int32), want.view(np.int32)), name
