"""What ``lnserve convert`` takes on its command line: a checkpoint prefix, a ``.npz`` file, a directory.
Passing one where another is expected (the ``.npz`` for the prefix, the folder for the file) is a usage
mistake, answered before anything is read with the path to pass instead (``usage_error``, exit 2), not with
the converter's "file not found" on a path the user never typed."""

from __future__ import annotations

from pathlib import Path

import typer

_CHECKPOINT_SUFFIXES = (".npz", ".pkl")


def _prefixes_in(folder: Path) -> list[str]:
    """The checkpoint prefixes in ``folder`` (a NAME.npz with its NAME.pkl), at most three, for the hint."""
    try:
        found = sorted(p.with_suffix("") for p in folder.glob("*.npz") if p.with_suffix(".pkl").is_file())
    except OSError:
        return []
    return [str(p) for p in found[:3]]


def order_embedding_prefix(value: Path) -> Path:
    """``PREFIX`` of ``convert order-embedding``: the path without ``.npz`` / ``.pkl``."""
    if value.is_dir():
        found = _prefixes_in(value)
        hint = f", e.g. {' or '.join(found)}" if found else " (PREFIX.npz and PREFIX.pkl)"
        raise typer.BadParameter(f"{value} is a directory; pass the checkpoint's prefix{hint}")
    if value.suffix == ".npz" and Path(f"{value}.pkl").is_file() and not value.with_suffix(".pkl").exists():
        raise typer.BadParameter(
            f"{value} with {value}.pkl beside it is a skip-thoughts checkpoint; convert it with "
            f"`lnserve convert skip-thoughts --uni {value} --tables DIR` (or skip-thoughts-training)"
        )
    if value.suffix in _CHECKPOINT_SUFFIXES and not Path(f"{value}.npz").exists():
        prefix = value.with_suffix("")
        raise typer.BadParameter(
            f"{value} is one of the checkpoint's files; pass its prefix, {prefix} "
            f"(both {prefix}.npz and {prefix}.pkl are read)"
        )
    return value


def npz_file(value: Path | None) -> Path | None:
    """A ``MODEL.npz`` (``--uni``, ``--bi``, the training checkpoint): the file itself, its ``.npz.pkl``
    beside it."""
    if value is None:
        return None
    if value.is_dir():
        found = sorted(str(p) for p in value.glob("*.npz"))[:3]
        hint = f", e.g. {' or '.join(found)}" if found else ""
        raise typer.BadParameter(f"{value} is a directory; pass the checkpoint's .npz file{hint}")
    if value.name.endswith(".npz.pkl"):
        npz = value.with_suffix("")
        raise typer.BadParameter(f"{value} is the options file; pass the .npz, {npz} (its .npz.pkl is read)")
    if not value.exists() and value.suffix != ".npz" and Path(f"{value}.npz").is_file():
        raise typer.BadParameter(f"{value} does not exist; pass the .npz file, {value}.npz")
    return value


def tables_dir(value: Path) -> Path:
    """``--tables``: the directory holding utable.npy, btable.npy and dictionary.txt."""
    if value.is_file():
        raise typer.BadParameter(
            f"{value} is a file; pass the directory that holds utable.npy, btable.npy and dictionary.txt, "
            f"e.g. {value.parent}"
        )
    return value


def plain_file(value: Path | None) -> Path | None:
    """A file option (``--dictionary``, ``--word2vec``): not a directory."""
    if value is not None and value.is_dir():
        raise typer.BadParameter(f"{value} is a directory; pass the file itself")
    return value
