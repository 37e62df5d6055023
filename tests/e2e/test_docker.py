"""The image built and run as a user runs it: ``docker build``, then ``docker compose up`` with the project's
compose file, on 127.0.0.1 only. Skipped without a container engine; CI (.ci/run) installs one.

Build arguments come from ``LNSERVE_DOCKER_BUILD_ARGS`` (``NAME=VALUE`` words, e.g. CI's
``BASE=lnserve-base:bookworm PIP_CERT=/pip/ca.crt``); without it the Dockerfile's defaults (the nvidia/cuda
base) are used. The image is tagged ``lnserve:test`` so a user's ``lnserve:latest`` is left alone. It holds
the core install only: no torch, and at most ``CPU_IMAGE_MAX_BYTES`` with onnxruntime's CPU build.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.e2e.server import ROOT, free_port, start_server

pytestmark = pytest.mark.docker

IMAGE = "lnserve:test"
BUILD_ARGS_ENV = "LNSERVE_DOCKER_BUILD_ARGS"
MODEL = "oe_order_lngru"  # a converted legacy checkpoint: the fused LN-GRU step runs in the container
SENTENCES = ["a dog sitting on a table", "two men ride horses on a beach", "unknownword zebra"]
BUILD_TIMEOUT_S = 1800.0  # cold: apt, ~60 wheels, the fused op (measured ~6.5 min on 2 cores)
READY_TIMEOUT_S = 180.0
UID = 10001
CPU_IMAGE_MAX_BYTES = 900_000_000  # the core, a Debian base, onnxruntime's CPU build (1.96 GB with torch)


@dataclass(frozen=True)
class Engine:
    docker: str
    compose: tuple[str, ...]  # `docker compose` (v2 plugin) or `docker-compose` (v1, Debian bookworm)


def _run(*cmd: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, (
        f"{shlex.join(cmd)} -> {proc.returncode}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
    )
    return proc.stdout.strip()


def _works(*cmd: str) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def engine() -> Engine:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no container engine (docker) on PATH")
    if not _works(docker, "info"):
        pytest.skip("docker is installed but its daemon does not answer (start dockerd)")
    if _works(docker, "compose", "version"):
        return Engine(docker, (docker, "compose"))
    v1 = shutil.which("docker-compose")
    if v1 is None:
        pytest.skip("no compose: install the docker compose plugin or docker-compose")
    return Engine(docker, (v1,))


@pytest.fixture(scope="module")
def image(engine: Engine) -> str:
    """``docker build`` as docs/docker.md says, with the build arguments CI (or the user) gives."""
    given = os.environ.get(BUILD_ARGS_ENV)
    args = [f"--build-arg={word}" for word in shlex.split(given or "")]
    cmd = (engine.docker, "build", "--tag", IMAGE, *args, str(ROOT))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    hint = (
        ""
        if given
        else (
            f"\n{BUILD_ARGS_ENV} is not set: the default BASE needs Docker Hub; without it: "
            f'{BUILD_ARGS_ENV}="$(.ci/docker-setup)" (docs/docker.md)'
        )
    )
    assert proc.returncode == 0, f"docker build failed:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}{hint}"
    return IMAGE


@dataclass
class Stack:
    """One compose project on a free 127.0.0.1 port; ``compose`` runs a compose subcommand in it."""

    engine: Engine
    env: dict[str, str]
    files: tuple[str, ...]
    url: str
    started: float = 0.0  # when ``compose up`` returned (monotonic)

    def compose(self, *args: str, timeout: float = 180.0) -> str:
        files = [a for f in self.files for a in ("-f", f)]
        return _run(*self.engine.compose, *files, *args, env=self.env, timeout=timeout)

    def container(self) -> str:
        return self.compose("ps", "-q", "lnserve").splitlines()[0]

    def inspect(self, template: str) -> str:
        return _run(self.engine.docker, "inspect", "--format", template, self.container())

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "lnserve")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/ready", timeout=4).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"no /ready after {READY_TIMEOUT_S} s:\n{self.logs()[-4000:]}")

    def wait_healthy(self) -> float:
        """Seconds until docker's own healthcheck (the image's HEALTHCHECK on /ready) says healthy."""
        start, deadline = time.monotonic(), time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            status = self.inspect("{{.State.Health.Status}}")
            if status == "healthy":
                return time.monotonic() - start
            assert status in ("starting", ""), f"container {status}:\n{self.logs()[-4000:]}"
            time.sleep(0.5)
        raise AssertionError(f"not healthy after {READY_TIMEOUT_S} s:\n{self.logs()[-4000:]}")


def _models_folder(path: Path, artifact: Path | None) -> Path:
    """A folder for /models that the container's user (uid 10001) can read."""
    path.mkdir()
    if artifact is not None:
        shutil.copytree(artifact, path / artifact.name)
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return path


@contextmanager
def compose_up(engine: Engine, image: str, models: Path, *files: str) -> Iterator[Stack]:
    """``docker compose up -d`` with the project's compose file (and ``files``); ``down -v`` after."""
    port = free_port()
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": f"lnserve-test-{os.getpid()}-{port}",
        "LNSERVE_IMAGE": image,
        "LNSERVE_PUBLISH": f"127.0.0.1:{port}",
        "LNSERVE_ARTIFACTS": str(models),
    }
    stack = Stack(engine, env, (str(ROOT / "docker-compose.yml"), *files), f"http://127.0.0.1:{port}")
    try:
        stack.compose("up", "-d", "--no-build")
        stack.started = time.monotonic()
        yield stack
    finally:
        stack.compose("down", "--volumes", "--timeout", "40")


@pytest.fixture(scope="module")
def stack(
    engine: Engine, image: str, artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    models = _models_folder(tmp_path_factory.mktemp("docker") / "models", artifacts[MODEL])
    with compose_up(engine, image, models) as running:
        yield running


def _encode(url: str) -> np.ndarray:
    r = httpx.post(url + "/encode", json={"model": MODEL, "sentences": SENTENCES}, timeout=60)
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["vectors"], dtype=np.float32)


# -- the tests, in the order a user meets them ----------------------------------------------------------
def test_the_image_holds_the_core_without_torch_and_its_size_is_recorded(
    engine: Engine, image: str, record_property: pytest.RecordProperty
) -> None:
    """``import torch`` fails in the image (the core install has no extra); its size is printed and recorded
    (junit property ``image_bytes``), and a CPU image stays within ``CPU_IMAGE_MAX_BYTES``."""
    probe = (
        "import importlib.util, json, onnxruntime; "
        "print(json.dumps({'torch': importlib.util.find_spec('torch') is not None, "
        "'device': onnxruntime.get_device()}))"
    )
    found = json.loads(_run(engine.docker, "run", "--rm", "--entrypoint", "python3", image, "-c", probe))
    proc = subprocess.run(
        [engine.docker, "run", "--rm", "--entrypoint", "python3", image, "-c", "import torch"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr, proc.stderr
    assert found["torch"] is False
    size = int(_run(engine.docker, "image", "inspect", "--format", "{{.Size}}", image))
    record_property("image_bytes", size)
    print(f"image {image}: {size / 1e6:.0f} MB, onnxruntime {found['device']}, no torch")
    if found["device"] == "CPU":
        assert size <= CPU_IMAGE_MAX_BYTES, f"{size / 1e6:.0f} MB"


def test_the_container_turns_healthy_and_serves_as_a_user_that_is_not_root(stack: Stack) -> None:
    stack.wait_ready()
    ready_s = time.monotonic() - stack.started
    healthy_s = stack.wait_healthy() + ready_s
    print(f"/ready {ready_s:.1f} s, healthy {healthy_s:.1f} s after compose up returned")
    assert stack.inspect("{{.Config.User}}").split(":")[0] == str(UID)
    status = _run(stack.engine.docker, "exec", stack.container(), "cat", "/proc/1/status")
    uids = next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1:]
    assert set(uids) == {str(UID)}, uids  # the server process itself (pid 1), every uid of it
    models = httpx.get(stack.url + "/models", timeout=10).json()
    assert [m["name"] for m in models["models"]] == [MODEL], models
    assert models["models"][0]["graph"] == "fused", models  # the image built the fused op and it self-checked


def test_encode_in_the_container_matches_the_local_server(
    stack: Stack, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    stack.wait_ready()
    inside = _encode(stack.url)
    local = start_server(tmp_path, "--models", str(artifacts[MODEL]))
    try:
        outside = _encode(local.url)
    finally:
        local.stop()
    assert inside.shape == outside.shape == (len(SENTENCES), outside.shape[1])
    gap = float(np.abs(inside - outside).max())
    print(f"container vs local server: max abs diff {gap:.2e}")
    assert gap <= 1e-5


def test_a_gallery_item_survives_a_container_restart(stack: Stack) -> None:
    stack.wait_ready()
    r = httpx.post(
        stack.url + "/galleries", json={"name": "docker-test", "kind": "captions", "model": MODEL}, timeout=30
    )
    assert r.status_code in (200, 201), r.text
    items = {"items": [{"id": "c1", "text": "two men ride horses on a beach"}, {"id": "c2", "text": "a cat"}]}
    r = httpx.post(stack.url + "/galleries/docker-test/items", json=items, timeout=60)
    assert r.status_code == 200 and r.json()["ids"] == ["c1", "c2"], r.text
    _run(stack.engine.docker, "restart", "--time", "40", stack.container(), timeout=120)
    stack.wait_ready()
    assert stack.inspect("{{.RestartCount}}") == "0"  # restarted by us, not by a crash
    r = httpx.get(stack.url + "/galleries/docker-test/items/c1", timeout=30)
    assert r.status_code == 200 and r.json()["id"] == "c1", r.text
    query = {"gallery": "docker-test", "query": {"text": "men ride horses on a beach"}, "k": 1}
    r = httpx.post(stack.url + "/retrieve", json=query, timeout=30)
    assert r.status_code == 200 and r.json()["results"][0]["id"] == "c1", r.text


def test_docker_stop_drains_in_flight_requests(stack: Stack, tmp_path: Path) -> None:
    """Eight requests held in flight by a 2 s batching wait when ``docker stop`` sends SIGTERM: each gets its
    200 and vectors, and the server exits 0 within the drain timeout (not killed at the grace period)."""
    slow = tmp_path / "slow.yml"
    slow.write_text(json.dumps({"services": {"lnserve": {"environment": {"LNSERVE_MAX_WAIT_MS": "2000"}}}}))
    stack.files = (*stack.files, str(slow))
    stack.compose("up", "-d", "--no-build")  # recreated with the wait; the gallery volume stays
    stack.wait_ready()
    answers: list[httpx.Response | Exception] = []

    def post(i: int) -> None:
        body = {"model": MODEL, "sentences": [f"a dog number {i} sitting on a table"]}
        try:
            answers.append(httpx.post(stack.url + "/encode", json=body, timeout=60))
        except httpx.HTTPError as exc:
            answers.append(exc)

    clients = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in clients:
        t.start()
    deadline = time.monotonic() + 30
    while "lnserve_inflight_requests 8.0" not in httpx.get(stack.url + "/metrics", timeout=10).text:
        assert time.monotonic() < deadline, "the 8 requests never were in flight together"
        time.sleep(0.05)
    container = stack.container()
    started = time.monotonic()
    _run(stack.engine.docker, "stop", "--time", "40", container, timeout=120)
    stopped_s = time.monotonic() - started
    for t in clients:
        t.join(60)
    print(f"docker stop returned after {stopped_s:.1f} s")
    assert len(answers) == 8
    for a in answers:
        assert isinstance(a, httpx.Response) and a.status_code == 200, a
        assert len(a.json()["vectors"]) == 1
    assert _run(stack.engine.docker, "inspect", "--format", "{{.State.ExitCode}}", container) == "0"
    assert stopped_s < 30, "killed at the grace period instead of exiting after the drain"
    assert '"msg": "shut down"' in stack.logs()


def test_an_empty_models_volume_serves_the_demo_and_says_so(
    engine: Engine, image: str, tmp_path: Path
) -> None:
    with compose_up(engine, image, _models_folder(tmp_path / "models", None)) as demo:
        demo.wait_ready()
        models = httpx.get(demo.url + "/models", timeout=10).json()
        assert [m["name"] for m in models["models"]] == ["demo-lngru"], models
        assert demo.inspect("{{.RestartCount}}") == "0"
        assert "/models: no model artifacts; serving the embedded demo model" in demo.logs()
