"""Usage mistakes through the real CLI (subprocesses): one line on stderr with a stable code,
exit 2, never a traceback or "internal error"; ``--help`` and ``--version`` still exit 0."""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from converters.order_embedding import read_order_embedding, write_order_embedding
from tests.conftest import run_cli
from tests.support.broken import OE_DIR

Proc = subprocess.CompletedProcess[str]


def one_line_error(proc: Proc, code: str, *, exit_code: int = 2) -> str:
    """The single stderr line of a refused command (what a person reads)."""
    assert proc.returncode == exit_code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert lines[0].startswith(f"lnserve: error [{code}]: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "oe"
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_gru"), out, name="oe")
    return out


# -- usage mistakes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["encod"], "No such command 'encod'. Did you mean 'encode'?"),
        (["gallery", "bild"], "No such command 'bild'"),
        (["encode", "{model}", "--bogus"], "No such option: --bogus"),
        (["--bogus"], "No such option: --bogus"),
        (["encode", "{model}", "--input", "in.txt"], "Missing option '--output'"),
        (["encode"], "Missing argument 'model_dir'"),
        (["encode", "{model}", "--output"], "Option '--output' requires an argument"),
        (["encode", "{model}", "--output", "o.npy", "--batch-size", "0"], "Invalid value for '--batch-size'"),
        (["serve", "--port", "eighty"], "Invalid value for '--port'"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(args: list[str], message: str, model: Path) -> None:
    proc = run_cli(*(a.format(model=model) for a in args))
    line = one_line_error(proc, "usage_error")
    assert message in line
    assert "--help" in line  # where to look next
    assert proc.stdout == ""


@pytest.mark.parametrize("args", [[], ["gallery"], ["convert"], ["train"]])
def test_a_missing_command_prints_the_help_and_exits_2(args: list[str]) -> None:
    proc = run_cli(*args)
    assert "missing command" in one_line_error(proc, "usage_error")
    assert "Usage: lnserve" in proc.stdout and "Commands" in proc.stdout


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"lnserve {version('lnserve')}\n" and proc.stderr == ""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["encode", "--help"], ["gallery", "build", "--help"], ["serve", "--help"], ["pull", "-h"]],
)
def test_help_still_exits_0(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: lnserve" in proc.stdout and proc.stderr == ""
