"""The core install (``pip install lnserve``, no extra) converts, exports, pulls, encodes with onnxruntime,
keeps galleries and serves; a command that needs an extra says which in one line (``missing_extra``, exit
2) and writes nothing.

Every command runs the real CLI in a fresh interpreter in which the extras' packages cannot be imported
(``sys.modules[name] = None``: ``import torch`` raises ``ModuleNotFoundError`` as it does where torch was
never installed), so a torch import on a core path fails here even though the dev environment has torch.
The checkout goes first on ``sys.path`` (its ``lnserve`` package maps ``app/``, ``models/`` and
``converters/`` itself): the code under test is this checkout's, whatever is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import LEGACY, golden, inputs
from tests.e2e.server import ROOT, free_port

pytestmark = pytest.mark.slow

# the import name of every package an extra adds (pyproject.toml's optional dependencies; the packaging
# test checks that this covers them all)
EXTRA_MODULES = {"torch": "torch", "scikit-learn": "sklearn", "scipy": "scipy", "ray": "ray"}
OE = LEGACY / "order_embedding"
ST = LEGACY / "skipthoughts_lngru"
TOL = 1e-5


def _code(blocked: tuple[str, ...]) -> str:
    return (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None  # as if not installed\n"
        "from lnserve.app.cli import main\n"
        "main()\n"
    )


def core(
    *args: str, cwd: Path, blocked: tuple[str, ...] = tuple(EXTRA_MODULES.values()), check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``lnserve ARGS`` with the extras' packages unimportable."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _code(blocked), *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
        env={**os.environ, "LNSERVE_GALLERIES_DIR": str(cwd / "galleries"), "LNSERVE_THREADS": "1"},
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, f"lnserve {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
    return proc


def missing_extra(proc: subprocess.CompletedProcess[str], extra: str) -> str:
    """The single stderr line of a command refused for want of ``extra``."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("lnserve: error [missing_extra]: "), proc.stderr
    assert lines[0].endswith(f"pip install 'lnserve[{extra}]'"), proc.stderr
    return lines[0]


def test_the_blocked_modules_are_unimportable(tmp_path: Path) -> None:
    """The harness itself: in its interpreter, ``import torch`` fails as on a host without torch."""
    code = _code(tuple(EXTRA_MODULES.values())).replace(
        "from lnserve.app.cli import main\nmain()\n", "import torch\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr


def test_convert_export_encode_score_without_the_extras(tmp_path: Path) -> None:
    """A legacy order-embedding and a skip-thoughts checkpoint: converted, exported, encoded and scored by
    onnxruntime, equal to the original Theano outputs."""
    oe, st = tmp_path / "oe", tmp_path / "st"
    core("convert", "order-embedding", str(OE / "oe_order_lngru"), "--out", str(oe), cwd=tmp_path)
    core("export", str(oe), cwd=tmp_path)
    assert (oe / "onnx" / "sentence.onnx").is_file()
    caps = tmp_path / "caps.txt"
    caps.write_text("\n".join(inputs()["order_embedding"]["captions"]) + "\n", encoding="utf-8")
    sent, img, errs = tmp_path / "s.npy", tmp_path / "i.npy", tmp_path / "e.npy"
    core("encode", str(oe), "--input", str(caps), "--output", str(sent), "--pretokenized", cwd=tmp_path)
    core("encode", str(oe), "--images", str(OE / "images.npy"), "--output", str(img), cwd=tmp_path)
    core("score", str(oe), "--sentences", str(sent), "--images", str(img), "--output", str(errs),
         cwd=tmp_path)  # fmt: skip
    gold = golden("oe_order_lngru")
    for path, key in ((sent, "sent_emb"), (img, "img_emb"), (errs, "errs")):
        assert np.abs(np.load(path) - gold[key]).max() <= TOL, key
    info = core("info", str(oe), cwd=tmp_path).stdout
    assert "backend: onnx" in info

    core(
        "convert", "skip-thoughts", "--uni", str(ST / "uni_skip.npz"), "--bi", str(ST / "bi_skip.npz"),
        "--tables", str(ST), "--out", str(st), cwd=tmp_path,
    )  # fmt: skip
    text = tmp_path / "st.txt"
    text.write_text("\n".join(inputs()["skipthoughts"]["sentences"]) + "\n", encoding="utf-8")
    out = tmp_path / "st.npy"
    core("encode", str(st), "--input", str(text), "--output", str(out), "--pretokenized", cwd=tmp_path)
    assert np.abs(np.load(out) - golden("skipthoughts_lngru")["feat_norm1_eos0"]).max() <= TOL
    raw = tmp_path / "raw.txt"  # raw text: NLTK's Punkt + Treebank tokenizer, a core dependency
    raw.write_text("A man rides a horse. It is raining!\n", encoding="utf-8")
    core("encode", str(st), "--input", str(raw), "--output", str(tmp_path / "raw.npy"), cwd=tmp_path)


def test_pull_and_galleries_without_the_extras(tmp_path: Path) -> None:
    """``pull`` (from a local folder: the published file names) converts and exports; a gallery is built,
    listed and checked with the numba kernels."""
    src = tmp_path / "offline"
    src.mkdir()
    for ext in ("npz", "pkl"):
        shutil.copy(OE / f"oe_order_lngru.{ext}", src / f"lngru_order_add0.{ext}")
    core("pull", "lngru-order", "--dir", str(tmp_path / "models"), "--from", str(src), cwd=tmp_path)
    model = tmp_path / "models" / "lngru-order"
    assert json.loads((model / "manifest.json").read_text())["onnx"]["graphs"]["sentence"]
    caps = tmp_path / "caps.txt"
    caps.write_text("a dog\na cat on a mat\na man riding a horse\n", encoding="utf-8")
    core("gallery", "build", "caps", "--model", str(model), "--captions", str(caps), cwd=tmp_path)
    assert "caps" in core("gallery", "ls", cwd=tmp_path).stdout
    core("gallery", "check", "caps", cwd=tmp_path)


def test_serve_without_the_extras(tmp_path: Path) -> None:
    """A converted legacy checkpoint served: /ready, /encode equal to the original's vectors, a gallery
    created and searched (the retrieval kernels), then SIGTERM."""
    oe = tmp_path / "oe"
    core("convert", "order-embedding", str(OE / "oe_order_lngru"), "--out", str(oe), cwd=tmp_path)
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _code(tuple(EXTRA_MODULES.values())), "serve", "--port", str(port),
             "--models", str(oe)],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "LNSERVE_GALLERIES_DIR": str(tmp_path / "galleries"), "LNSERVE_THREADS": "1"},
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, log)
        captions = inputs()["order_embedding"]["captions"]
        r = httpx.post(f"{url}/encode", json={"sentences": captions, "pretokenized": True}, timeout=60)
        assert r.status_code == 200, r.text
        got = np.asarray(r.json()["vectors"], dtype=np.float32)
        assert np.abs(got - golden("oe_order_lngru")["sent_emb"]).max() <= TOL
        r = httpx.post(f"{url}/galleries", json={"name": "g", "kind": "captions"}, timeout=60)
        assert r.status_code == 201, r.text
        items = [{"id": f"c{i}", "text": c} for i, c in enumerate(captions[:5])]
        r = httpx.post(f"{url}/galleries/g/items", json={"items": items}, timeout=60)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{url}/retrieve", json={"gallery": "g", "query": {"id": "c0"}, "k": 3}, timeout=60)
        assert r.status_code == 200, r.text
    finally:
        proc.terminate()
        proc.wait(60)
    assert "ModuleNotFoundError" not in log.read_text(errors="replace")


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/ready", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"not ready after {timeout} s:\n{log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def oe_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An RMS-cell model (rlngru): ONNX runs it, and marked pRMSNorm below only torch does."""
    root = tmp_path_factory.mktemp("oe")
    core("convert", "order-embedding", str(OE / "oe_order_rlngru"), "--out", str(root / "oe"), cwd=root)
    return root / "oe"


def _prms_artifact(oe: Path, tmp: Path) -> Path:
    """A copy of ``oe`` marked as a pRMSNorm model (``cell_options.partial_rms`` < 1): only torch runs it."""
    prms = tmp / "prms"
    shutil.copytree(oe, prms)
    manifest = json.loads((prms / "manifest.json").read_text())
    manifest["cell_options"] = {"partial_rms": 0.5}
    (prms / "manifest.json").write_text(json.dumps(manifest))
    return prms


# every command that needs an extra: (extra, arguments); {oe}, {prms}, {tmp} are filled in, and {out} is the
# path that must not appear
NEEDS_AN_EXTRA = {
    "encode --backend torch": (
        "torch", ("encode", "{oe}", "--input", "{caps}", "--output", "{out}", "--backend", "torch"),
    ),
    "encode a pRMSNorm model (no ONNX graph)": (
        "torch", ("encode", "{prms}", "--input", "{caps}", "--output", "{out}"),
    ),
    "eval --backend torch": (
        "torch",
        ("eval", "--model", "{oe}", "--captions", "{caps5}", "--images", "{ims}", "--folds", "1",
         "--backend", "torch", "--json", "{out}"),
    ),
    "serve --backend torch": (
        "torch", ("serve", "--models", "{oe}", "--backend", "torch", "--port", "{port}"),
    ),
    "serve a pRMSNorm model": ("torch", ("serve", "--models", "{prms}", "--port", "{port}")),
    "encode --precision bf16 (the torch backend's profile)": (
        "torch", ("encode", "{oe}", "--input", "{caps}", "--output", "{out}", "--precision", "bf16"),
    ),
    "serve --precision bf16": (
        "torch", ("serve", "--models", "{oe}", "--precision", "bf16", "--port", "{port}"),
    ),
    "serve --ray": ("ray", ("serve", "--models", "{oe}", "--ray", "--port", "{port}")),
    "train order-embedding": (
        "torch", ("train", "order-embedding", "--world", "demo", "--epochs", "1", "--out", "{out}"),
    ),
    "gallery build --backend torch": (
        "torch",
        ("gallery", "build", "g", "--model", "{oe}", "--captions", "{caps}", "--backend", "torch",
         "--galleries-dir", "{out}"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(NEEDS_AN_EXTRA))
def test_a_command_that_needs_a_missing_extra_names_it(case: str, oe_artifact: Path, tmp_path: Path) -> None:
    extra, template = NEEDS_AN_EXTRA[case]
    caps = tmp_path / "caps.txt"
    caps.write_text("a dog\na cat on a mat\n", encoding="utf-8")
    caps5 = tmp_path / "caps5.txt"
    caps5.write_text("\n".join(f"caption {i}" for i in range(10)) + "\n", encoding="utf-8")
    ims = tmp_path / "ims.npy"
    np.save(ims, np.ones((2, 20), dtype=np.float32))
    out = tmp_path / "out"
    fill = {
        "oe": str(oe_artifact), "prms": str(_prms_artifact(oe_artifact, tmp_path)), "caps": str(caps),
        "caps5": str(caps5), "ims": str(ims), "out": str(out), "port": str(free_port()),
    }  # fmt: skip
    args = [a.format(**fill) for a in template]
    line = missing_extra(core(*args, cwd=tmp_path, check=False), extra)
    assert "Traceback" not in line
    assert not out.exists()  # nothing written
    assert not (tmp_path / "galleries").exists()


@pytest.mark.parametrize(
    ("task", "fast", "module"),
    [("sick-r", False, "torch"), ("mr", True, "torch"), ("mr", False, "sklearn"), ("sts14", False, "scipy")],
)
def test_eval_skip_thoughts_names_the_eval_extra(task: str, fast: bool, module: str, tmp_path: Path) -> None:
    """Each evaluation task checks the libraries it fits with before a model loads: only ``module`` is
    missing here, and the line names it and ``lnserve[eval]``."""
    from tests.support.eval_sets import write_all

    data = write_all(tmp_path / "data")
    st = tmp_path / "st"
    core(
        "convert", "skip-thoughts", "--uni", str(ST / "uni_skip.npz"), "--tables", str(ST), "--out", str(st),
        cwd=tmp_path,
    )  # fmt: skip
    out = tmp_path / "report.json"
    args = ["eval", "skip-thoughts", "--model", str(st), "--data", str(data), "--task", task]
    args += ["--json", str(out), *(["--fast"] if fast else [])]
    proc = core(*args, cwd=tmp_path, blocked=(module,), check=False)
    line = missing_extra(proc, "eval")
    assert f"task {task}" in line and f"needs {module}," in line
    assert not out.exists()


def test_extra_modules_cover_every_extra() -> None:
    """EXTRA_MODULES names the import of every package the torch, eval and ray extras add."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = set()
    for extra in ("torch", "eval", "ray"):
        for req in extras[extra]:
            name = req.split(";")[0].split("[")[0]
            for sep in "=<>!~ ":
                name = name.split(sep)[0]
            if name != "lnserve":
                names.add(name)
    assert names == set(EXTRA_MODULES)
