"""``docs/gallery-item-ids.md`` works verbatim: its ```bash examples run against a real demo server, as the
README's do (``tests/e2e/test_readme_examples.py``: same runner, same output notation)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from tests.e2e.server import ROOT, start_server
from tests.e2e.test_readme_examples import make_workdir, readme_blocks, run_block

PAGE = ROOT / "docs" / "gallery-item-ids.md"


def test_the_item_id_page_examples_run_verbatim(tmp_path: Path) -> None:
    blocks = readme_blocks(PAGE)
    assert blocks and all(b.steps for b in blocks)
    (tmp_path / "server").mkdir()
    server = start_server(tmp_path / "server")
    try:
        env = make_workdir(tmp_path / "clone")
        port = urlparse(server.url).port
        assert port is not None
        problems = [p for block in blocks for p in run_block(block, tmp_path / "clone", env, port)]
        assert not problems, "\n\n".join(problems)
    finally:
        server.stop()
