"""``--precision`` through the real CLI (subprocesses): ``lnserve encode --precision int8`` keeps every vector
of each fixture family within the fidelity bar of the goldens; ``info``, ``eval`` and ``eval skip-thoughts``
run and say the precision they ran at; and every command that takes ``--precision`` refuses a bad value, or
one its backend cannot run, with one line and exit 2, before it writes anything (``serve`` before it binds
its port)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lnserve.app.runtime.cpu_features import cpu_flags, int8_scheme_for
from lnserve.app.runtime.fused_op.loader import fused_op_status
from tests.conftest import LEGACY, golden, inputs, run_cli
from tests.e2e.server import ROOT, free_port
from tests.support import eval_sets
from tests.support.vector_checks import cosines, one_error_line

COSINE_BAR = 0.999  # the bar for every vector
OE_FIXTURES = ("oe_order_lngru", "oe_order_gru", "oe_order_rlngru")
ST_FIXTURES = ("skipthoughts_lngru", "skipthoughts_gru")


@pytest.mark.parametrize("name", [*OE_FIXTURES, *ST_FIXTURES])
def test_encode_int8_keeps_every_vector_within_the_bar(
    name: str, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    oe = name in OE_FIXTURES
    texts = inputs()["order_embedding"]["captions"] if oe else inputs()["skipthoughts"]["sentences"]
    gold = golden(name)["sent_emb" if oe else "feat_norm1_eos0"]
    src, out = tmp_path / "in.txt", tmp_path / "out.npy"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = ["encode", str(artifacts[name]), "--input", str(src), "--output", str(out), "--pretokenized"]
    run_cli(*args, *([] if oe else ["--no-eos"]), "--precision", "int8", check=True)
    got = np.load(out)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    cos = cosines(got, gold)
    assert cos.min() >= COSINE_BAR, (name, float(cos.min()), int(cos.argmin()))
    assert not np.array_equal(got, gold.astype(np.float32))  # the int8 graph ran, not the exact one


def test_info_and_evaluations_say_their_precision(artifacts: dict[str, Path], tmp_path: Path) -> None:
    model = artifacts["oe_order_lngru"]
    shown = json.loads(run_cli("info", str(model), "--precision", "int8", "--json", check=True).stdout)
    assert shown["precision"] == "int8" and shown["backend"] == "onnx"
    assert shown["providers"] == ["CPUExecutionProvider"]
    assert shown["graph"] == ("fused" if fused_op_status().library.is_file() else "plain")
    assert shown["int8_scheme"] == int8_scheme_for(cpu_flags())  # the activation scheme this CPU runs
    exact = json.loads(run_cli("info", str(model), "--json", check=True).stdout)
    assert exact["precision"] == "fp32" and exact["int8_scheme"] is None

    caps, images = _retrieval_inputs(tmp_path)
    reports = {}
    for precision in ("fp32", "int8"):
        out = tmp_path / f"eval-{precision}.json"
        run_cli("eval", "--model", str(model), "--captions", str(caps), "--images", str(images),
                "--pretokenized", "--json", str(out), "--precision", precision, check=True)  # fmt: skip
        reports[precision] = json.loads(out.read_text(encoding="utf-8"))
    assert {p: r["precision"] for p, r in reports.items()} == {"fp32": "fp32", "int8": "int8"}

    data = tmp_path / "sets"
    data.mkdir()
    eval_sets.write_sts14(data)
    st = artifacts["skipthoughts_lngru"]
    scores = {}
    for precision in ("fp32", "int8"):
        proc = run_cli("eval", "skip-thoughts", "--model", str(st), "--task", "sts14", "--data", str(data),
                       "--json", "-", "--precision", precision, check=True)  # fmt: skip
        report = json.loads(proc.stdout[proc.stdout.index("{") :])
        assert report["precision"] == precision
        scores[precision] = report["tasks"]["sts14"]
    assert scores["int8"] != scores["fp32"]  # it ran at int8


def _retrieval_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """The fixture's 12 images and 5 captions for each (its 40 captions, cycled), as ``eval`` wants them."""
    every = inputs()["order_embedding"]["captions"]
    images = np.load(LEGACY / "order_embedding" / "images.npy")
    caps, feats = tmp_path / "caps.txt", tmp_path / "images.npy"
    caps.write_text("\n".join(every[i % len(every)] for i in range(5 * len(images))) + "\n", encoding="utf-8")
    np.save(feats, images)
    return caps, feats


# -- every command with --precision refuses what it cannot run -------------------------------------------
BAD = {
    "unknown": (["--precision", "int9"], "invalid_input", "unknown precision 'int9'; expected one of"),
    "upper case": (["--precision", "INT8"], "invalid_input", "unknown precision 'INT8'"),
    "int8 on torch": (
        ["--precision", "int8", "--backend", "torch"],
        "invalid_input",
        "precision int8 runs on the onnx backend, not torch",
    ),
    "fp16 on torch": (
        ["--precision", "fp16", "--backend", "torch"],
        "invalid_input",
        "precision fp16 runs on the onnx backend, not torch",
    ),
}


def _commands(artifacts: dict[str, Path], tmp_path: Path) -> dict[str, tuple[list[str], Callable[[], bool]]]:
    """Command -> (its arguments with valid inputs, whether it wrote anything)."""
    oe, st = str(artifacts["oe_order_lngru"]), str(artifacts["skipthoughts_lngru"])
    caps, images = _retrieval_inputs(tmp_path)
    data = tmp_path / "sets"
    data.mkdir(exist_ok=True)
    eval_sets.write_sts14(data)
    out, gdir, report = tmp_path / "out.npy", tmp_path / "galleries", tmp_path / "report.json"
    return {
        "encode": (["encode", oe, "--input", str(caps), "--output", str(out)], out.exists),
        "gallery build": (
            ["gallery", "build", "g", "--model", oe, "--captions", str(caps), "--galleries-dir", str(gdir)],
            lambda: (gdir / "g").exists(),
        ),
        "eval": (
            ["eval", "--model", oe, "--captions", str(caps), "--images", str(images), "--json", str(report)],
            report.exists,
        ),
        "eval skip-thoughts": (
            [
                "eval",
                "skip-thoughts",
                "--model",
                st,
                "--task",
                "sts14",
                "--data",
                str(data),
                "--json",
                str(report),
            ],
            report.exists,
        ),
        "info": (["info", oe], lambda: False),
    }


COMMANDS = ["encode", "gallery build", "eval", "eval skip-thoughts", "info"]


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_precision_it_cannot_run(
    command: str, bad: str, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    args, wrote = _commands(artifacts, tmp_path)[command]
    extra, code, words = BAD[bad]
    line = one_error_line(run_cli(*args, *extra), code)
    assert words in line, line
    assert not wrote(), command


def test_info_refuses_int8_on_a_gpu_provider(artifacts: dict[str, Path]) -> None:
    proc = run_cli("info", str(artifacts["oe_order_lngru"]), "--precision", "int8", "--provider",
                   "CUDAExecutionProvider")  # fmt: skip
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("lnserve: error [") and "precision int8 runs on CPUExecutionProvider" in line, line


# -- lnserve serve: refused before the port is bound ------------------------------------------------------
SERVE_BAD = {
    "env unknown": ({"LNSERVE_PRECISION": "int9"}, [], "invalid_setting", "LNSERVE_PRECISION='int9'"),
    "flag unknown": ({}, ["--precision", "int9"], "invalid_setting", "--precision 'int9'"),
    "env int8 on torch": (
        {"LNSERVE_PRECISION": "int8", "LNSERVE_BACKEND": "torch"},
        [],
        "invalid_input",
        "precision int8 runs on the onnx backend, not torch",
    ),
    "flags int8 on torch": (
        {},
        ["--precision", "int8", "--backend", "torch"],
        "invalid_input",
        "precision int8 runs on the onnx backend, not torch",
    ),
    "fp16 on torch": (
        {"LNSERVE_BACKEND": "torch"},
        ["--precision", "fp16"],
        "invalid_input",
        "precision fp16 runs on the onnx backend, not torch",
    ),
}


@pytest.mark.parametrize("case", list(SERVE_BAD))
def test_serve_refuses_a_bad_precision_before_it_binds(case: str, tmp_path: Path) -> None:
    env, args, code, words = SERVE_BAD[case]
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LNSERVE_")},
        "LNSERVE_GALLERIES_DIR": str(tmp_path / "galleries"),  # never the user's galleries
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", "serve", "--port",
         str(free_port()), *args],
        capture_output=True, text=True, timeout=120, env=full_env, cwd=ROOT,
    )  # fmt: skip
    line = one_error_line(proc, code)
    assert words in line, line
    assert "listening on" not in proc.stderr + proc.stdout  # refused before the port was bound
