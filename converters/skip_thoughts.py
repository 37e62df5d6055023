"""Skip-thoughts checkpoints: ``uni_skip.npz`` / ``bi_skip.npz`` with their bare-options ``.npz.pkl``,
plus ``utable.npy``, ``btable.npy`` and ``dictionary.txt`` from one tables directory.

The tables (930,913 x 620 float32, about 2.3 GB each) are streamed straight into the artifact.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.errors import UserInputError, shown
from lnserve.hashing import sha256_file

from . import CONVERTER_VERSION
from .artifact import (
    SKIP_PART_MODULES,
    finish_manifest,
    save_weights,
    staging_dir,
    write_json,
)
from .detect import detect_cell
from .errors import CorruptFileError, TableMismatchError
from .families import SKIP_THOUGHTS
from .legacy_files import (
    convert_table,
    int_option,
    open_npz,
    read_dictionary,
    read_legacy_pickle,
    require_file,
    text_option,
)
from .param_map import cell_state_dict, check_params, expected_cell_shapes, extra_keys

log = logging.getLogger("lnserve.converters")

DICTIONARY = "dictionary.json"
TABLE_FILES = {"uni": ("utable.npy", "uni_table.npy"), "bi": ("btable.npy", "bi_table.npy")}
Progress = Callable[[str, int, int], None]
STANDARD_UNUSED = frozenset({"Wemb", "history_errs"})  # saved by the trainer, replaced by the tables


@dataclass
class SkipHalf:
    """One of uni-skip / bi-skip, validated."""

    kind: str  # "uni" or "bi"
    cell: str
    dim: int
    dim_word: int
    tensors: dict[str, np.ndarray]
    notes: list[str]
    sources: dict[str, str]


def published_extra(key: str) -> bool:
    return key in STANDARD_UNUSED


def read_skip_half(
    npz_path: Path,
    kind: str,
    *,
    cell: str | None = None,
    expected_extra: Callable[[str], bool] = published_extra,
) -> SkipHalf:
    """Read ``X.npz`` + ``X.npz.pkl`` (a bare options dict) for the uni or bi model. Extra members that
    ``expected_extra`` accepts are logged, any other is a note (the training format also saves decoders)."""
    pkl_path = Path(f"{npz_path}.pkl")
    options = read_legacy_pickle(pkl_path)
    if not isinstance(options, dict) or not all(k in options for k in ("dim", "dim_word", "encoder")):
        raise CorruptFileError(f"{pkl_path}: expected an options dict with dim, dim_word and encoder")
    dim, dim_word = int_option(options, "dim", pkl_path), int_option(options, "dim_word", pkl_path)
    encoder = text_option(options, "encoder", pkl_path)
    prefixes = list(SKIP_PART_MODULES[kind])
    with open_npz(npz_path) as npz:  # only the encoder members are read (not Wemb or the decoders)
        chosen, note = detect_cell(encoder, npz.keys, prefix="encoder", override=cell)
        expected: dict[str, tuple[int, ...]] = {}
        for prefix in prefixes:
            expected.update(expected_cell_shapes(prefix, chosen, dim_word, dim))
        check_params(npz.headers(expected), expected, source=str(npz_path))
        params = npz.arrays(expected)
        extras = extra_keys(npz.keys, expected)
    notes = [note] if note else []
    standard = [k for k in extras if expected_extra(k)]
    if standard:  # every published skip-thoughts file has these: not worth a warning
        log.info("%s: not used for encoding: %s", npz_path.name, ", ".join(standard))
    if unusual := [k for k in extras if not expected_extra(k)]:
        notes.append(f"ignored extra parameter(s) in {npz_path.name}: {', '.join(map(shown, unusual))}")
    tensors: dict[str, np.ndarray] = {}
    for prefix, module in SKIP_PART_MODULES[kind].items():
        for k, v in cell_state_dict(params, prefix, chosen).items():
            tensors[f"{module}.cell.{k}"] = v
    for n in notes:
        log.warning(n)
    sources = {npz_path.name: sha256_file(npz_path), pkl_path.name: sha256_file(pkl_path)}
    return SkipHalf(kind, chosen, dim, dim_word, tensors, notes, sources)


def convert_skip_thoughts(
    *,
    uni: Path | None,
    bi: Path | None,
    tables: Path,
    out: Path,
    name: str,
    cell: str | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Validate the models, stream the tables into a new artifact at ``out``; returns the manifest."""
    if uni is None and bi is None:
        raise UserInputError("give at least one of --uni and --bi")
    halves = [read_skip_half(p, k, cell=cell) for k, p in (("uni", uni), ("bi", bi)) if p is not None]
    dim_words = {h.dim_word for h in halves}
    if len(dim_words) != 1:
        raise CorruptFileError(f"uni and bi disagree on dim_word: {sorted(dim_words)}")
    dim_word = dim_words.pop()
    dict_path = tables / "dictionary.txt"
    words = read_dictionary(dict_path)
    sources = {dict_path.name: sha256_file(dict_path)}
    for h in halves:
        sources.update(h.sources)
    with staging_dir(out, overwrite=overwrite) as tmp:
        for h in halves:
            src_name, dst_name = TABLE_FILES[h.kind]
            src = require_file(tables / src_name)
            n, d = convert_table(
                src,
                tmp / dst_name,
                progress=functools.partial(progress, src_name) if progress else None,
            )
            if n != len(words):
                raise TableMismatchError(f"{src}: {n} rows but dictionary.txt has {len(words)} lines")
            if d != dim_word:
                raise TableMismatchError(f"{src}: rows have {d} values, the model's dim_word is {dim_word}")
            sources[src_name] = sha256_file(src)
        save_weights(tmp, {k: v for h in halves for k, v in h.tensors.items()})
        write_json(tmp / DICTIONARY, {"words": words})
        manifest = {
            "name": name,
            "family": SKIP_THOUGHTS.name,
            "demo": False,
            "description": "",
            "converter_version": CONVERTER_VERSION,
            "parts": {
                h.kind: {"cell": h.cell, "dim": h.dim, "table": TABLE_FILES[h.kind][1]} for h in halves
            },
            "dims": {
                "dim_word": dim_word,
                "n_table_rows": len(words),
                "output_dim": sum(h.dim * (2 if h.kind == "bi" else 1) for h in halves),
            },
            "tokenizer": SKIP_THOUGHTS.tokenizer,
            "defaults": dict(SKIP_THOUGHTS.defaults),
            "sources": sources,
            "notes": [n for h in halves for n in h.notes],
        }
        return finish_manifest(tmp, manifest)
