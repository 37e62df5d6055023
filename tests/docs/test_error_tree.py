"""docs/errors.md holds the error tree generated from every layer's ``errors.py``
(``tests.support.error_tree``): regenerated here in a fresh interpreter (only the package's classes loaded),
it must be the page's, so the page cannot drift from the code. Fix a failure with
``python -m tests.support.error_tree``."""

from __future__ import annotations

import subprocess
import sys

from tests.support.error_tree import BEGIN, END, PAGE, ROOT


def test_errors_page_is_the_tree_generated_from_the_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.error_tree", "--print"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = PAGE.read_text(encoding="utf-8")
    on_page = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert on_page == proc.stdout.rstrip("\n"), (
        "docs/errors.md differs from the error classes: run python -m tests.support.error_tree"
    )
