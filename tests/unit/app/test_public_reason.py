"""Error reasons sent to clients (reload_failed, /health) name no server path."""

from __future__ import annotations

from pathlib import Path

from lnserve.app.serving.registry import public_reason


def test_model_files_are_named_relative_to_the_model_directory(tmp_path: Path) -> None:
    model = tmp_path / "models" / "served"
    reason = f"ArtifactError: {model}/weights.safetensors: sha256 mismatch (in {model})"
    assert public_reason(reason, model) == (
        "ArtifactError: weights.safetensors: sha256 mismatch (in <model directory>)"
    )


def test_other_absolute_paths_keep_only_their_last_part(tmp_path: Path) -> None:
    reason = "OSError: cannot open '/usr/lib/x86_64-linux-gnu/libfoo.so.1' (see /etc/ld.so.conf)"
    assert public_reason(reason, tmp_path) == "OSError: cannot open 'libfoo.so.1' (see ld.so.conf)"


def test_text_that_is_not_a_path_is_left_alone(tmp_path: Path) -> None:
    reason = "shape (3, 4) vs 1/2 of a/b, see http://example.org/a/b"
    assert public_reason(reason, tmp_path) == reason
