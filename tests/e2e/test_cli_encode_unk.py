"""``lnserve encode`` says on stderr when sentences have words the model does not know (mapped to UNK)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli


def test_encode_notes_unknown_words(artifacts: dict[str, Path], tmp_path: Path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("a dog on a bus\na zqxj dog wvkp\nzqxj\n", encoding="utf-8")
    out = tmp_path / "o.npy"
    proc = run_cli("encode", str(artifacts["oe_order_lngru"]), "--input", str(text), "--output", str(out))
    assert proc.returncode == 0 and out.exists(), proc.stderr
    note = "2 of 3 sentences have words the model does not know (3 tokens mapped to UNK; first: line 2)"
    assert note in proc.stderr


def test_encode_is_quiet_when_every_word_is_known(artifacts: dict[str, Path], tmp_path: Path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("a dog on a bus\n", encoding="utf-8")
    proc = run_cli(
        "encode", str(artifacts["oe_order_lngru"]), "--input", str(text), "--output", str(tmp_path / "o.npy")
    )
    assert proc.returncode == 0 and "UNK" not in proc.stderr, proc.stderr
