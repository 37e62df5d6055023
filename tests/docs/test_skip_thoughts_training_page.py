"""docs/skip-thoughts-training.md works verbatim (issue 26), run as the README's examples are
(tests/docs/test_readme_examples.py): every ```bash block in page order in one working directory, where the
"downloaded" files are the training-format fixtures under the release's names and a uni-skip directory built
the way ``lookup_table`` builds one from the same ``Wemb`` (tests/support/uni_skip_pair.py). ``lnserve
serve`` examples must turn ``/ready``; the curl examples run against a real server on the converted artifact
(``localhost:8000`` rewritten to its port) and must show what the page shows."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import LEGACY
from tests.docs.test_readme_examples import (
    OWN_RUNNER,
    _is_serve_block,
    make_workdir,
    readme_blocks,
    run_block,
    run_serve_block,
)
from tests.e2e.server import ROOT, LiveServer, start_server
from tests.support.uni_skip_pair import build_uni_skip

PAGE = ROOT / "docs" / "skip-thoughts-training.md"
SRC = LEGACY / "skipthoughts_training_lngru"
EXCLUDED = {
    "# needs network access": "downloads from the published host; pull ln-skip is tested against a local "
    "HTTP server in tests/e2e/test_pull_ln_skip.py",
}


def _workdir(work: Path, galleries: Path) -> dict[str, str]:
    env = make_workdir(work, galleries)
    downloads = work / "downloads"
    for name in ("uni_skip.npz", "uni_skip.npz.pkl", "utable.npy", "dictionary.txt"):
        (downloads / name).unlink(missing_ok=True)
    build_uni_skip(downloads)
    shutil.copyfile(SRC / "model.npz", downloads / "lngru_may13_1700000.npz")
    shutil.copyfile(SRC / "model.npz.pkl", downloads / "lngru_may13_1700000.npz.pkl")
    shutil.copyfile(SRC / "w2v.bin", downloads / "GoogleNews-vectors-negative300.bin")
    return env


def test_page_examples_run_verbatim(tmp_path: Path) -> None:
    blocks = readme_blocks(PAGE)
    assert {b.marker for b in blocks if b.marker in EXCLUDED} == set(EXCLUDED)
    work = tmp_path / "clone"
    env = _workdir(work, tmp_path / "galleries")
    server: LiveServer | None = None
    problems: list[str] = []
    ran = 0
    try:
        for block in blocks:
            if block.marker in EXCLUDED:
                continue
            ran += 1
            if _is_serve_block(block):
                problems += run_serve_block(block, work, env)
                continue
            port = 0
            if any(s.command.lstrip().startswith("curl") for s in block.steps):
                if server is None:
                    server = start_server(tmp_path, "--models", str(work / "artifacts" / "ln-skip"))
                port = int(server.url.rsplit(":", 1)[1])
            problems += run_block(block, work, env, port)
    finally:
        if server is not None:
            server.stop()
    assert ran >= 6
    assert not problems, "docs examples that do not work as written:\n\n" + "\n\n".join(problems)
    assert (work / "vectors.npy").is_file() and (work / "downloads" / "uni_skip_dictionary.pkl").is_file()


def test_the_generic_runner_leaves_this_page_to_this_test() -> None:
    assert OWN_RUNNER[PAGE.name] == str(Path(__file__).relative_to(ROOT))


def test_readme_links_the_page() -> None:
    assert "docs/skip-thoughts-training.md" in (ROOT / "README.md").read_text(encoding="utf-8")
