"""Training checkpoints: everything needed to resume bit-for-bit, in one file written atomically.

Saved with ``torch.save`` and loaded with ``weights_only=True``, so a checkpoint holds only tensors and
plain containers and loading one never runs pickled code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from lnserve.errors import UserInputError

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = 1


def checkpoint_dir(out: Path) -> Path:
    """Where a run writing the artifact ``out`` keeps its checkpoint: ``OUT.train/`` beside it (the
    artifact directory itself is replaced atomically when the run finishes)."""
    return out.parent / f"{out.name}.train"


def save_checkpoint(directory: Path, payload: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path, tmp = directory / CHECKPOINT, directory / f".{CHECKPOINT}.tmp"
    with tmp.open("wb") as f:  # fsync before the rename: a crash must leave the old or the new checkpoint
        torch.save({"format": CHECKPOINT_FORMAT, **payload}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(directory: Path) -> dict[str, Any]:
    """The last checkpoint in ``directory``. Raises UserInputError when there is none or it is unreadable."""
    path = directory / CHECKPOINT
    if not path.is_file():
        raise UserInputError(f"{path}: no checkpoint to resume from (run without --resume first)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors here
        raise UserInputError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UserInputError(f"{path}: not an lnserve training checkpoint of format {CHECKPOINT_FORMAT}")
    return payload
