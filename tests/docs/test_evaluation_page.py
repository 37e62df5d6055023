"""docs/evaluation.md works verbatim: each ```bash block runs as written in a directory standing for the
reader's clone (``.venv`` -> this checkout's, ``artifacts/combine_skip`` a converted skip-thoughts fixture,
``data/`` the synthetic sets in the distribution formats). Blocks starting ``# needs network access`` are
not run (pip). The ```python SentEval block needs SentEval; its calls are tested in test_senteval_adapter.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tests.e2e.server import ROOT
from tests.support import eval_sets

DOC = ROOT / "docs" / "evaluation.md"


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_every_bash_block_runs(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(artifacts["skipthoughts_lngru"], tmp_path / "artifacts" / "combine_skip")
    eval_sets.write_all(tmp_path / "data", binary_n=40)
    blocks = bash_blocks()
    ran = 0
    for block in blocks:
        if block.startswith("# needs network access"):
            continue
        proc = subprocess.run(["bash", "-e", "-c", block], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0, f"{block}\n{proc.stderr}"
        assert proc.stdout.startswith("lnserve eval skip-thoughts: model skipthoughts_lngru, ")
        ran += 1
    assert ran == 2
    report = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(report["tasks"]) == {"mr", "trec"} and report["mode"] == "faithful"
