"""Checks the precision and calibration tests share: cosine to a reference vector, and the CLI's one-line
refusal."""

from __future__ import annotations

import subprocess
from typing import Any

import numpy as np


def cosines(a: Any, b: Any) -> np.ndarray:
    """Row-wise cosine of two (N, d) arrays, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape and a.ndim == 2, (a.shape, b.shape)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def one_error_line(proc: subprocess.CompletedProcess[str], code: str) -> str:
    """The one stderr line of a refusal with ``code``: exit 2, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lnserve: error [{code}]: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]
