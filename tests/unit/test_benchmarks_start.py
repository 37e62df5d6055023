"""Every benchmark starts: its imports resolve against today's code and it answers ``--help`` (a module of
the benchmarks that is no script, e.g. graph_variants.py, is imported). Benchmarks are
run by hand, so nothing else notices when a refactor takes away a name one imports (gallery_integrity.py
imported ``timed`` from retrieval.py for months after retrieval.py stopped defining it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found() -> None:
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_starts_and_answers_help(script: Path) -> None:
    is_script = 'if __name__ == "__main__":' in script.read_text(encoding="utf-8")
    command = (
        [sys.executable, str(script), "--help"]
        if is_script
        else [sys.executable, "-c", f"import runpy; runpy.run_path({str(script)!r})"]
    )
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout or not is_script
