"""The app must build from the installed package alone: Ray replicas (and any deployment) import it from a
working directory that is not the repository, where the top-level folder names are not importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_create_app_imports_its_routers_from_the_package(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "from lnserve.app.http.main import create_app; from lnserve.app.settings import Settings; "
        "app = create_app(Settings(galleries_dir='g')); print(sorted(app.openapi()['paths']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'/encode'" in proc.stdout and "'/retrieve'" in proc.stdout
