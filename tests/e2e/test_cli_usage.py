"""Usage mistakes and bad settings through the real CLI (subprocesses): one line on stderr with a stable code,
exit 2, never a traceback or "internal error"; ``--help`` and ``--version`` still exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from tests.conftest import run_cli
from tests.support.broken import OE_DIR, ST_DIR

Proc = subprocess.CompletedProcess[str]


def one_line_error(proc: Proc, code: str, *, exit_code: int = 2) -> str:
    """The single stderr line of a refused command (what a person reads)."""
    assert proc.returncode == exit_code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert lines[0].startswith(f"lnserve: error [{code}]: "), lines[0]
    return lines[0]


def run_env(*args: str, env: dict[str, str] | None = None) -> Proc:
    """``run_cli`` with ``LNSERVE_*`` cleared from the environment, then ``env`` added."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LNSERVE_")}
    return subprocess.run(
        [sys.executable, "-c", "from lnserve.app.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, **(env or {})},
    )


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "oe"
    write_order_embedding(read_order_embedding(OE_DIR / "oe_order_gru"), out, name="oe")
    return out


# -- usage mistakes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["encod"], "No such command 'encod'. Did you mean 'encode'?"),
        (["gallery", "bild"], "No such command 'bild'"),
        (["encode", "{model}", "--bogus"], "No such option: --bogus"),
        (["--bogus"], "No such option: --bogus"),
        (["encode", "{model}", "--input", "in.txt"], "Missing option '--output'"),
        (["encode"], "Missing argument 'model_dir'"),
        (["encode", "{model}", "--output"], "Option '--output' requires an argument"),
        (["encode", "{model}", "--output", "o.npy", "--batch-size", "0"], "Invalid value for '--batch-size'"),
        (["serve", "--port", "eighty"], "Invalid value for '--port'"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(args: list[str], message: str, model: Path) -> None:
    proc = run_cli(*(a.format(model=model) for a in args))
    line = one_line_error(proc, "usage_error")
    assert message in line
    assert "--help" in line  # where to look next
    assert proc.stdout == ""


OE = OE_DIR / "oe_order_gru"
ST_TRAIN = OE_DIR.parent / "skipthoughts_training_lngru"
ST_OPTS = ["--tables", str(ST_DIR), "--out", "{out}"]


# a path of the wrong kind for each path of `lnserve convert` (a file for a prefix, a folder for a file...)
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["order-embedding", f"{OE}.npz"], f"pass its prefix, {OE} "),
        (["order-embedding", f"{OE}.pkl"], f"pass its prefix, {OE} "),
        (["order-embedding", str(OE_DIR)], f"is a directory; pass the checkpoint's prefix, e.g. {OE} "),
        (["order-embedding", str(ST_DIR / "uni_skip.npz")], "is a skip-thoughts checkpoint"),
        (
            ["skip-thoughts", "--uni", str(ST_DIR), *ST_OPTS],
            f"pass the checkpoint's .npz file, e.g. {ST_DIR}",
        ),
        (
            ["skip-thoughts", "--bi", str(ST_DIR / "bi_skip"), *ST_OPTS],
            f"pass the .npz file, {ST_DIR}/bi_skip.npz",
        ),
        (["skip-thoughts", "--uni", str(ST_DIR / "uni_skip.npz.pkl"), *ST_OPTS], "pass the .npz"),
        (
            ["skip-thoughts", "--uni", str(ST_DIR / "uni_skip.npz"), "--tables", str(ST_DIR / "utable.npy")],
            f"pass the directory that holds utable.npy, btable.npy and dictionary.txt, e.g. {ST_DIR}",
        ),
        (
            ["skip-thoughts-training", str(ST_TRAIN), "--dictionary", str(ST_TRAIN / "dictionary.pkl")],
            f"pass the checkpoint's .npz file, e.g. {ST_TRAIN}/model.npz",
        ),
        (
            ["skip-thoughts-training", str(ST_TRAIN / "model.npz"), "--dictionary", str(ST_TRAIN)],
            "is a directory; pass the file itself",
        ),
    ],
)
def test_convert_names_the_path_to_pass_for_a_path_of_the_wrong_kind(
    args: list[str], says: str, tmp_path: Path
) -> None:
    """``convert order-embedding x.npz`` answered ``[corrupt_file] x.npz.pkl: file not found``."""
    out = tmp_path / "out"
    argv = [a.format(out=out) for a in args]
    proc = run_cli("convert", *argv, *([] if "--out" in argv else ["--out", str(out)]))
    line = one_line_error(proc, "usage_error")
    assert says in line and "--help" in line, line
    assert not out.exists()


@pytest.mark.parametrize("args", [[], ["gallery"], ["convert"], ["train"]])
def test_a_missing_command_prints_the_help_and_exits_2(args: list[str]) -> None:
    proc = run_cli(*args)
    assert "missing command" in one_line_error(proc, "usage_error")
    assert "Usage: lnserve" in proc.stdout and "Commands" in proc.stdout


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"lnserve {version('lnserve')}\n" and proc.stderr == ""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["encode", "--help"], ["gallery", "build", "--help"], ["serve", "--help"], ["pull", "-h"]],
)
def test_help_still_exits_0(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: lnserve" in proc.stdout and proc.stderr == ""


def test_serve_help_names_the_ray_extra() -> None:
    """Rich markup once swallowed ``[ray]``: the help said ``pip install 'lnserve'``."""
    proc = run_cli("serve", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "lnserve[ray]" in " ".join(proc.stdout.replace("│", " ").split()), proc.stdout


# -- bad settings -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"LNSERVE_PORT": "abc"}, [], "LNSERVE_PORT='abc': port must be an integer from 0 to 65535"),
        ({}, ["--port", "80800"], "--port 80800: port must be an integer from 0 to 65535"),
        ({"LNSERVE_BACKEND": "tensorrt"}, [], "LNSERVE_BACKEND='tensorrt': backend must be one of onnx"),
        ({}, ["--backend", "tensorrt"], "--backend 'tensorrt': backend must be one of onnx, torch"),
        ({"LNSERVE_PRECISION": "fp8"}, [], "LNSERVE_PRECISION='fp8': precision must be one of fp32, fp16"),
        ({"LNSERVE_MAX_QUEUE": "0"}, [], "LNSERVE_MAX_QUEUE='0': max_queue must be an integer >= 1"),
        ({"LNSERVE_ACCESS_LOG": "maybe"}, [], "LNSERVE_ACCESS_LOG='maybe': access_log must be true or false"),
    ],
)
def test_bad_settings_name_the_setting_and_what_is_allowed(
    env: dict[str, str], args: list[str], message: str
) -> None:
    proc = run_env("serve", *args, env=env)
    line = one_line_error(proc, "invalid_setting")
    assert message in line
    assert "validation error" not in line and "pydantic" not in line
    assert proc.stdout == ""


def test_every_bad_setting_is_named_on_the_one_line() -> None:
    proc = run_env("serve", "--port", "-1", env={"LNSERVE_BACKEND": "tensorrt"})
    line = one_line_error(proc, "invalid_setting")
    assert "LNSERVE_BACKEND='tensorrt'" in line and "--port -1" in line


def _command_paths() -> list[list[str]]:
    """Every command and group of the CLI, walked from the typer app (a new command is covered unedited)."""
    import typer

    from lnserve.app.cli import app

    def walk(command: object, path: list[str]) -> list[list[str]]:
        subs = getattr(command, "commands", {})
        return [path] + [p for name, sub in sorted(subs.items()) for p in walk(sub, [*path, name])]

    return walk(typer.main.get_command(app), [])


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "lnserve")
def test_help_shows_no_type_on_plain_flags(path: list[str]) -> None:
    """typer's rich help printed ``<bool>`` beside flags that take no value (``--debug``, ``--help``)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", *path, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "--help" in proc.stdout and "<bool>" not in proc.stdout, proc.stdout
