"""The goldens again, end to end through the real CLI: convert -> encode -> score, in subprocesses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LEGACY, OE_MODELS, ST_VARIANTS, golden, inputs, run_cli

TOL = 1e-5


@pytest.mark.parametrize("name", OE_MODELS)
def test_cli_order_embedding(name: str, tmp_path: Path) -> None:
    art = tmp_path / "model"
    run_cli(
        "convert", "order-embedding", str(LEGACY / "order_embedding" / name), "--out", str(art), check=True
    )
    caps = tmp_path / "caps.txt"
    caps.write_text("\n".join(inputs()["order_embedding"]["captions"]) + "\n", encoding="utf-8")
    sent, img, errs = tmp_path / "s.npy", tmp_path / "i.npy", tmp_path / "e.npy"
    run_cli("encode", str(art), "--input", str(caps), "--output", str(sent), "--pretokenized", check=True)
    images = LEGACY / "order_embedding" / "images.npy"
    run_cli("encode", str(art), "--images", str(images), "--output", str(img), check=True)
    run_cli(
        "score", str(art), "--sentences", str(sent), "--images", str(img), "--output", str(errs), check=True
    )
    gold = golden(name)
    for path, key in ((sent, "sent_emb"), (img, "img_emb"), (errs, "errs")):
        ours = np.load(path)
        assert ours.dtype == np.float32 and ours.shape == gold[key].shape
        assert np.abs(ours - gold[key]).max() <= TOL, key


@pytest.mark.parametrize("variant", ST_VARIANTS)
def test_cli_skip_thoughts(variant: str, tmp_path: Path) -> None:
    src, art = LEGACY / variant, tmp_path / "model"
    run_cli(
        "convert",
        "skip-thoughts",
        "--uni",
        str(src / "uni_skip.npz"),
        "--bi",
        str(src / "bi_skip.npz"),
        "--tables",
        str(src),
        "--out",
        str(art),
        check=True,
    )
    text = tmp_path / "s.txt"
    text.write_text("\n".join(inputs()["skipthoughts"]["sentences"]) + "\n", encoding="utf-8")
    gold = golden(variant)
    for flags, key in (((), "feat_norm1_eos0"), (("--eos", "--no-normalize"), "feat_norm0_eos1")):
        out = tmp_path / f"{key}.npy"
        run_cli(
            "encode",
            str(art),
            "--input",
            str(text),
            "--output",
            str(out),
            "--pretokenized",
            *flags,
            check=True,
        )
        assert np.abs(np.load(out) - gold[key]).max() <= TOL, key
