"""``lnserve eval`` and ``lnserve gallery`` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LEGACY, OE_MODELS, golden, inputs, run_cli


@pytest.mark.parametrize("name", OE_MODELS)
def test_eval_reproduces_golden_ranks(name: str, artifacts: dict[str, Path], tmp_path: Path) -> None:
    g = golden(name)
    caps = inputs()["order_embedding"]["captions"]
    (tmp_path / "caps.txt").write_text("".join(caps[i] + "\n" for i in g["eval_caption_indices"]), "utf-8")
    np.save(tmp_path / "ims.npy", np.load(LEGACY / "order_embedding" / "images.npy")[: int(g["eval_K"])])
    proc = run_cli(
        "eval",
        "--model", str(artifacts[name]),
        "--captions", str(tmp_path / "caps.txt"),
        "--images", str(tmp_path / "ims.npy"),
        "--pretokenized",
        "--json", str(tmp_path / "out.json"),
        check=True,
    )  # fmt: skip
    assert "caption->image" in proc.stdout and "one fold with all images" in proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    keys = ("r1", "r5", "r10", "medr", "meanr")
    np.testing.assert_allclose([result["t2i"][k] for k in keys], g["t2i_stats"], rtol=0, atol=1e-9)
    np.testing.assert_allclose([result["i2t"][k] for k in keys], g["i2t_stats"], rtol=0, atol=1e-9)
    assert result["score"]["direction"] == "lower_is_better"


def test_eval_refuses_captions_not_five_per_image(artifacts: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "caps.txt").write_text("a dog\n" * 7, "utf-8")
    np.save(tmp_path / "ims.npy", np.load(LEGACY / "order_embedding" / "images.npy")[:2])
    proc = run_cli(
        "eval", "--model", str(artifacts["oe_order_gru"]),
        "--captions", str(tmp_path / "caps.txt"), "--images", str(tmp_path / "ims.npy"),
    )  # fmt: skip
    assert proc.returncode == 2 and "5 captions per image" in proc.stderr


def test_gallery_build_ls_rm(artifacts: dict[str, Path], tmp_path: Path) -> None:
    root = str(tmp_path / "galleries")
    (tmp_path / "caps.txt").write_text(
        "".join(c + "\n" for c in inputs()["order_embedding"]["captions"]), "utf-8"
    )
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(12)), "utf-8")
    model = str(artifacts["oe_order_lngru"])
    images = str(LEGACY / "order_embedding" / "images.npy")
    run_cli("gallery", "build", "caps", "--model", model, "--captions", str(tmp_path / "caps.txt"),
            "--galleries-dir", root, check=True)  # fmt: skip
    run_cli("gallery", "build", "ims", "--model", model, "--images", images, "--payloads",
            str(tmp_path / "p.jsonl"), "--galleries-dir", root, check=True)  # fmt: skip
    listed = json.loads(run_cli("gallery", "ls", "--json", "--galleries-dir", root, check=True).stdout)
    assert [(g["name"], g["kind"], g["count"]) for g in listed] == [
        ("caps", "captions", 40),
        ("ims", "images", 12),
    ]
    assert listed[0]["score"]["direction"] == "lower_is_better"
    again = run_cli("gallery", "build", "ims", "--model", model, "--images", images, "--galleries-dir", root)
    assert again.returncode == 2 and "[gallery_exists]" in again.stderr
    run_cli("gallery", "rm", "ims", "--galleries-dir", root, check=True)
    gone = run_cli("gallery", "rm", "ims", "--galleries-dir", root)
    assert gone.returncode == 2 and "[gallery_not_found]" in gone.stderr
    assert "ims" not in run_cli("gallery", "ls", "--galleries-dir", root, check=True).stdout


def test_gallery_build_refuses_a_name_with_a_trailing_newline(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "galleries"
    (tmp_path / "caps.txt").write_text("a dog\n", "utf-8")
    proc = run_cli("gallery", "build", "evil\n", "--model", str(artifacts["oe_order_gru"]),
                   "--captions", str(tmp_path / "caps.txt"), "--galleries-dir", str(root))  # fmt: skip
    assert proc.returncode == 2 and "[invalid_input]" in proc.stderr and "bad gallery name" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not root.exists() or not any("\n" in p.name for p in root.iterdir())


def test_gallery_build_append_after_deletions(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """``--append`` numbered new items from the live count, so after any deletion the new ids collided
    (duplicate_item) for good: numbers now continue past every row ever stored and every all-digit id."""
    from lnserve.app.galleries.store import GalleryStore

    root = tmp_path / "galleries"
    model = str(artifacts["oe_order_gru"])
    caps = tmp_path / "caps.txt"
    caps.write_text("a dog\na cat\na red car\n", "utf-8")
    build = [
        "gallery",
        "build",
        "caps",
        "--model",
        model,
        "--captions",
        str(caps),
        "--galleries-dir",
        str(root),
    ]
    run_cli(*build, check=True)
    store = GalleryStore(root, scorer="numpy")
    store.delete_item("caps", "1")
    store.delete_item("caps", "2")  # the last one too: its number is not handed out again either
    run_cli(*build, "--append", check=True)
    ids = [f"{i}" for i in (0, 3, 4, 5)]
    assert [store.get_item("caps", i)["payload"]["text"] for i in ids] == [
        "a dog",
        "a dog",
        "a cat",
        "a red car",
    ]
    assert store.get("caps").count == 4
    # an all-digit id from elsewhere (e.g. added over HTTP) past the numbers: numbering continues after it
    vec = store.get_item("caps", "0", with_vector=True)["vector"]
    store.add("caps", vec[None, :], ids=["41"], payloads=[None])
    run_cli(*build, "--append", check=True)
    assert store.get_item("caps", "42")["payload"] == {"text": "a dog"}
    assert store.get("caps").count == 8
