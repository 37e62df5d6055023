"""The README and every page of docs/ work verbatim: each ```bash example runs as written, in page order.

Each page (README.md, then every docs/*.md, found by name: a new page is run with no edit here) starts in a
fresh working directory, so a page never depends on another page's examples.

One working directory stands for the reader's clone: ``.venv/bin/lnserve`` runs this checkout, and the
"downloaded" checkpoints the README names (``downloads/...``) are the legacy fixtures under those names. The
HTTP examples run against a real demo server (``lnserve serve`` with no models, as the README says to start);
only ``localhost:8000`` is rewritten to its free port, and curl is told to fail on an HTTP error status. The
``lnserve serve`` examples are started for real (on a free port) and must turn ``/ready``.

Each step must exit 0; a curl step must answer 2xx with JSON (or nothing, for 204); where the README shows the
output (``# {...}``, ``...`` standing for anything), the keys and values shown must match.

A block whose first line is one of ``EXCLUDED`` is not run; the reason is given here. ``/docs`` is checked
too: it must work offline (no CDN), every asset it names served by the server itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import httpx
import numpy as np
import pytest

from tests.conftest import LEGACY, inputs
from tests.e2e.server import ROOT, LiveServer, free_port, start_server

README = ROOT / "README.md"
# pages whose examples need files of their own, run by their own test (with these helpers) instead
OWN_RUNNER = {
    "skip-thoughts-training.md": "tests/docs/test_skip_thoughts_training_page.py",
    "evaluation.md": "tests/docs/test_evaluation_page.py",
}
PAGES = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_RUNNER)]

# first line of a block -> why the test does not run it
EXCLUDED = {
    "# from a fresh clone": "`make serve` runs until stopped (this test starts the same demo server itself) "
    "and `make test` is the suite this test is part of",
    "# takes minutes": "training runs for minutes on 2 cores; the trainer and these flags are tested in "
    "tests/unit/app/training",
    "# needs network access": "downloads from the published hosts, and tests have no internet; pull itself "
    "is tested against a local HTTP server in tests/e2e/test_pull.py",
    "# needs a Ray cluster or several GPUs": "these run until stopped on hardware the tests lack; "
    "`serve --ray` itself (2 replicas, 2 shards, a local Ray instance) is tested in tests/e2e/test_ray.py",
    "# needs docker": "a docker daemon and minutes to build; tests/e2e/test_docker.py builds the image and "
    "runs it with the compose file (skipped without an engine), tests/e2e/test_deploy_files.py checks both",
}
ANY = "\x00any"  # what `...` becomes in an expected output


@dataclass
class Step:
    command: str
    expected: str | None = None


@dataclass
class Block:
    page: Path
    number: int
    heading: str
    text: str
    steps: list[Step] = field(default_factory=list)

    @property
    def marker(self) -> str:
        return self.text.splitlines()[0].strip()

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)} block {self.number} ({self.heading})"


# -- reading the README --------------------------------------------------------------------------------
def readme_blocks(page: Path = README) -> list[Block]:
    """The ```bash blocks of the README (or of another Markdown page written the same way)."""
    blocks: list[Block] = []
    heading, inside, lines = "", False, []
    for line in page.read_text(encoding="utf-8").splitlines():
        if not inside and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif not inside and line.strip() == "```bash":
            inside, lines = True, []
        elif inside and line.strip() == "```":
            inside = False
            text = "\n".join(lines)
            blocks.append(Block(page, len(blocks) + 1, heading, text, split_steps(text)))
        elif inside:
            lines.append(line)
    return blocks


def _complete(command: str) -> bool:
    """Whether a command is whole: no line continuation, no open quote."""
    if command.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def _balanced(text: str) -> bool:
    return text.count("{") + text.count("[") == text.count("}") + text.count("]")


def split_steps(text: str) -> list[Step]:
    """Commands (with their continuation lines) and the expected output a ``# {...}`` comment shows."""
    steps: list[Step] = []
    buf: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            last = steps[-1] if steps else None
            if last and last.expected is not None and not _balanced(last.expected):
                last.expected += body
            elif last and body.startswith("{"):
                last.expected = body
            continue
        if not buf and not stripped:
            continue
        buf.append(line)
        command = "\n".join(buf)
        if _complete(command):
            steps.append(Step(command, _inline_expected(command)))
            buf = []
    assert not buf, f"unterminated command in a README block: {buf}"
    return steps


def _inline_expected(command: str) -> str | None:
    """``curl ... /items/img-1   # {"id":"img-1",...}``: an expected output as a trailing comment."""
    last = command.splitlines()[-1]
    m = re.search(r"\s#\s*(\{.*)$", last)
    if m and _complete(command[: len(command) - len(last) + m.start()]):
        return m.group(1)
    return None


# -- expected outputs --------------------------------------------------------------------------------
def parse_expected(text: str) -> Any:
    """README output notation -> JSON with ``ANY`` for every ``...`` outside a string."""
    out, in_str, i = [], False, 0
    while i < len(text):
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("...", i):
            out.append(json.dumps(ANY))
            i += 2
        else:
            out.append(c)
        i += 1
    joined = "".join(out).replace("{" + json.dumps(ANY) + "}", json.dumps(ANY))
    joined = re.sub(r",\s*" + re.escape(json.dumps(ANY)) + r"\s*}", "}", joined)  # {"a": 1, ...}: more keys
    return json.loads(joined)


def mismatch(expected: Any, actual: Any, path: str = "$") -> str | None:
    """Why ``actual`` does not show what ``expected`` shows (keys shown must match; ``...`` is anything)."""
    if expected == ANY:
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected an object, got {actual!r:.80}"
        for key, value in expected.items():
            if key not in actual:
                return f"{path}: no key {key!r} (keys: {sorted(actual)})"
            if why := mismatch(value, actual[key], f"{path}.{key}"):
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"{path}: expected a list, got {actual!r:.80}"
        shown, open_ended = (expected[:-1], True) if expected and expected[-1] == ANY else (expected, False)
        if len(actual) < len(shown) or (not open_ended and len(actual) != len(shown)):
            return f"{path}: {len(actual)} items, the README shows {len(expected)}"
        for i, value in enumerate(shown):
            if why := mismatch(value, actual[i], f"{path}[{i}]"):
                return why
        return None
    if isinstance(expected, str) and "..." in expected:
        pattern = ".*".join(re.escape(p) for p in expected.split("..."))
        ok = isinstance(actual, str) and re.fullmatch(pattern, actual, re.S)
        return None if ok else f"{path}: {actual!r:.80} does not look like {expected!r}"
    return None if expected == actual else f"{path}: {actual!r:.80}, the README shows {expected!r}"


# -- the reader's working directory ----------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def make_workdir(work: Path, galleries: Path) -> dict[str, str]:
    """The files the examples assume, and the environment their commands run in: ``galleries`` is the demo
    server's, as a reader's ``lnserve gallery`` commands and server share one directory."""
    venv_bin = work / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    lnserve = venv_bin / "lnserve"
    lnserve.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "from lnserve.app.cli import main; main()" "$@"\n'
    )
    lnserve.chmod(0o755)
    oe, st = LEGACY / "order_embedding", LEGACY / "skipthoughts_lngru"
    for ext in ("npz", "pkl"):
        _copy(oe / f"oe_order_lngru.{ext}", work / "downloads" / f"lngru_order_add0.{ext}")
        _copy(oe / f"oe_order_rms_as_lngru.{ext}", work / "downloads" / "rms" / f"order.{ext}")
        _copy(oe / f"oe_order_gru.{ext}", work / "downloads" / "order-embedding" / f"order.{ext}")
    for name in ("uni_skip.npz", "uni_skip.npz.pkl", "bi_skip.npz", "bi_skip.npz.pkl"):
        _copy(st / name, work / "downloads" / name)
    for name in ("utable.npy", "btable.npy", "dictionary.txt"):
        _copy(st / name, work / "downloads" / name)
    captions = inputs()["order_embedding"]["captions"]
    (work / "captions.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")
    images = np.load(oe / "images.npy")
    np.save(work / "feats.npy", images)
    np.save(work / "test_ims.npy", images)
    five = [captions[(5 * i + j) % len(captions)] for i in range(len(images)) for j in range(5)]
    (work / "test_caps.txt").write_text("\n".join(five) + "\n", encoding="utf-8")
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LNSERVE_GALLERIES_DIR": str(galleries),  # never the user's own galleries
        "LNSERVE_THREADS": "1",
    }


# -- running blocks ------------------------------------------------------------------------------------
_MARK = "@@readme-step"


def _rewrite_http(command: str, port: int) -> str:
    command = command.replace("localhost:8000", f"127.0.0.1:{port}")
    return re.sub(r"\bcurl -s\b", "curl -s --fail-with-body", command)


def run_block(block: Block, work: Path, env: dict[str, str], port: int) -> list[str]:
    """Run the block's steps in one bash (so variables carry over, as in a terminal); problems found."""
    script = []
    for i, step in enumerate(block.steps):
        script.append(f"{{\n{_rewrite_http(step.command, port)}\n}} 2>>.readme-stderr")
        script.append(f"printf '\\n{_MARK} {i} %s\\n' \"$?\"")
    proc = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    err_file = work / ".readme-stderr"
    stderr = err_file.read_text(errors="replace")[-3000:] if err_file.exists() else ""
    outputs: dict[int, tuple[int, str]] = {}
    chunk: list[str] = []
    for line in proc.stdout.splitlines():
        m = re.fullmatch(rf"{_MARK} (\d+) (\d+)", line)
        if m:
            outputs[int(m.group(1))] = (int(m.group(2)), "\n".join(chunk).strip())
            chunk = []
        else:
            chunk.append(line)
    problems = []
    for i, step in enumerate(block.steps):
        where = f"{block}, `{step.command.splitlines()[0][:90]}`"
        if i not in outputs:
            problems.append(f"{where}: did not run (bash exited {proc.returncode}): {proc.stderr[-500:]}")
            continue
        rc, out = outputs[i]
        if rc != 0:
            problems.append(f"{where}: exit status {rc}\nstdout: {out[:500]}\nstderr: {stderr}")
            continue
        problems += _check_output(where, step, out)
    err_file.unlink(missing_ok=True)
    return problems


def _check_output(where: str, step: Step, out: str) -> list[str]:
    is_curl = step.command.lstrip().startswith("curl")
    if not is_curl and step.expected is None:
        return []
    if not out:
        return [] if step.expected is None else [f"{where}: no output, the README shows {step.expected}"]
    try:
        body = json.loads(out)
    except ValueError:
        return [f"{where}: not JSON: {out[:300]}"]
    if step.expected is None:
        return []
    why = mismatch(parse_expected(step.expected), body)
    return [f"{where}: {why}"] if why else []


def run_serve_block(block: Block, work: Path, env: dict[str, str]) -> list[str]:
    """Each ``lnserve serve`` example, started for real on a free port: it must turn /ready, then stop."""
    problems = []
    for step in block.steps:
        port = free_port()
        command = re.sub(r"LNSERVE_PORT=\d+", f"LNSERVE_PORT={port}", step.command)
        log = work / f".serve-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=work,
                env={**env, "LNSERVE_PORT": str(port)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            why = _wait_ready(proc, f"http://127.0.0.1:{port}", timeout=180)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if why:
            problems.append(f"{block}, `{step.command}`: {why}\n{log.read_text(errors='replace')[-2000:]}")
    return problems


def _wait_ready(proc: subprocess.Popen[bytes], url: str, *, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode} before /ready"
        try:
            if httpx.get(url + "/ready", timeout=2.0).status_code == 200:
                return None
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return f"not ready after {timeout:.0f} s"


def _is_serve_block(block: Block) -> bool:
    serve = [re.search(r"\blnserve serve\b", s.command.split("#")[0]) is not None for s in block.steps]
    assert all(serve) or not any(serve), f"{block}: keep `lnserve serve` examples in a block of their own"
    return all(serve) and bool(serve)


# -- tests ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readme-demo")


@pytest.fixture(scope="module")
def demo(demo_home: Path) -> Iterator[LiveServer]:
    """What the README tells the reader to start first: `lnserve serve`, the demo model and its gallery
    (with reload allowed without a key, as the reload example says)."""
    env = {"LNSERVE_RELOAD_WITHOUT_KEY": "true"}
    srv = start_server(demo_home, env=env)  # its galleries: demo_home / "galleries"
    yield srv
    srv.stop()


def all_blocks() -> list[Block]:
    pages = [*PAGES, *(ROOT / "docs" / name for name in OWN_RUNNER)]
    return [block for page in pages for block in readme_blocks(page)]


def test_every_block_is_run_or_excluded_for_a_stated_reason() -> None:
    blocks = all_blocks()
    assert len(readme_blocks()) >= 4, "the README parser found too few ```bash blocks"
    assert len(blocks) >= 20, "the docs parser found too few ```bash blocks"
    used = {b.marker for b in blocks if b.marker in EXCLUDED}
    assert used == set(EXCLUDED), f"markers no block uses any more: {set(EXCLUDED) - used}"
    for block in blocks:
        assert block.steps, f"{block} has no command"
        if block.marker not in EXCLUDED:  # a runnable example has no placeholders a shell cannot run
            for step in block.steps:
                code = re.sub(r"#.*$", "", step.command, flags=re.M)
                assert not re.search(r"\[--|\.\.\.|<[a-z]", code), f"{block}: placeholder in `{step.command}`"


def run_page(page: Path, work: Path, port: int, galleries: Path) -> tuple[int, list[str]]:
    """Every block of ``page`` not excluded, in order, in a fresh working directory: (ran, problems)."""
    env = make_workdir(work, galleries)
    problems: list[str] = []
    ran = 0
    for block in readme_blocks(page):
        if block.marker in EXCLUDED:
            continue
        ran += 1
        if _is_serve_block(block):
            problems += run_serve_block(block, work, env)
        else:
            problems += run_block(block, work, env, port)
    return ran, problems


def _port(demo: LiveServer) -> int:
    port = urlparse(demo.url).port
    assert port is not None
    return port


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_shell_examples_run_verbatim(demo: LiveServer, demo_home: Path, tmp_path: Path, page: Path) -> None:
    ran, problems = run_page(page, tmp_path / "clone", _port(demo), demo_home / "galleries")
    if page == README:
        assert ran >= 4
    assert not problems, f"{page.name} examples that do not work as written:\n\n" + "\n\n".join(problems)


def test_gallery_examples_clean_up_and_run_twice(demo: LiveServer, demo_home: Path, tmp_path: Path) -> None:
    """The galleries page creates galleries on the server and removes them: a reader can run it again."""
    page = ROOT / "docs" / "retrieval.md"
    for attempt in ("first", "second"):
        ran, problems = run_page(page, tmp_path / attempt, _port(demo), demo_home / "galleries")
        assert ran and not problems, f"{attempt} run:\n\n" + "\n\n".join(problems)


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.urls.append(value)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_api_docs_work_offline(demo: LiveServer, page: str) -> None:
    """Swagger UI / ReDoc come from the server itself, not a CDN: an offline host still gets its docs."""
    html = httpx.get(demo.url + page)
    assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    parser = _Assets()
    parser.feed(html.text)
    scripts = [u for u in parser.urls if u.endswith(".js")]
    assert scripts, f"{page} names no script"
    assert "openapi.json" in html.text
    for url in parser.urls:
        full = urljoin(demo.url + page, url)
        assert urlparse(full).netloc == urlparse(demo.url).netloc, f"{page} loads {url} from elsewhere"
        r = httpx.get(full)
        assert r.status_code == 200 and r.content, f"{url}: {r.status_code}"
    assert httpx.get(demo.url + "/openapi.json").json()["info"]["title"] == "lnserve"
