"""The Python client examples of README.md and docs/clients.md run as written against a real server (only
``127.0.0.1:8000`` is rewritten to its port), in a fresh interpreter with the clients' offline settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import ROOT, LiveServer

PAGES = [ROOT / "README.md", ROOT / "docs" / "clients.md"]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", page.read_text(encoding="utf-8"), flags=re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    return [
        (f"{page.relative_to(ROOT)}#{i}", code)
        for page in PAGES
        for i, code in enumerate(python_blocks(page), 1)
        if "127.0.0.1:8000" in code
    ]


def test_the_client_sections_have_examples() -> None:
    names = {name.split("#")[0] for name, _ in _examples()}
    assert names == {"README.md", "docs/clients.md"}
    assert len(_examples()) >= 6


@pytest.mark.parametrize(("name", "code"), _examples(), ids=[n for n, _ in _examples()])
def test_example_runs(server: LiveServer, name: str, code: str) -> None:
    for module in re.findall(r"^\s*(?:from|import) ([a-z_]+)", code, flags=re.M):
        pytest.importorskip(module, reason=f"{module} is a dev dependency")
    port = server.url.rsplit(":", 1)[1]
    script = code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
