"""Order-embedding checkpoints: ``PREFIX.npz`` (parameters) + ``PREFIX.pkl`` ({'options', 'worddict'})."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lnserve.errors import brief, shown
from lnserve.hashing import sha256_file

from . import CONVERTER_VERSION
from .artifact import VOCAB, finish_manifest, save_weights, staging_dir, write_json
from .detect import detect_cell
from .errors import CorruptFileError
from .families import ORDER_EMBEDDING
from .legacy_files import (
    flag_option,
    int_option,
    number_option,
    open_npz,
    read_legacy_pickle,
    text_option,
)
from .param_map import (
    cell_state_dict,
    check_params,
    expected_cell_shapes,
    extra_keys,
    legacy_cell_params,
)

log = logging.getLogger("lnserve.converters")

MAX_ID = 2**31  # ids index Wemb's rows (int32 in the graphs)
_REQUIRED_OPTIONS = ("encoder", "dim", "dim_word", "dim_image", "n_words")


@dataclass
class ConvertedOrderEmbedding:
    """Everything an order-embedding artifact holds, before it is written."""

    cell: str
    options: dict[str, Any]
    worddict: dict[str, int]
    tensors: dict[str, np.ndarray]
    notes: list[str]
    sources: dict[str, str]


def _options(pkl: Any, source: Path) -> tuple[dict[str, Any], dict[str, int]]:
    if not isinstance(pkl, dict) or "options" not in pkl or "worddict" not in pkl:
        raise CorruptFileError(f"{source}: expected a dict with 'options' and 'worddict'")
    options, worddict = pkl["options"], pkl["worddict"]
    if not isinstance(options, dict) or not isinstance(worddict, dict):
        raise CorruptFileError(f"{source}: 'options' and 'worddict' must be dicts")
    missing = [k for k in _REQUIRED_OPTIONS if k not in options]
    if missing:
        raise CorruptFileError(f"{source}: options lack {', '.join(missing)}")
    # an id is a row of Wemb (or past n_words: UNK): a 20,000-digit integer or a bool is not one
    bad = [
        (k, v) for k, v in worddict.items() if type(k) is not str or type(v) is not int or not 0 <= v < MAX_ID
    ]
    if bad:
        word, index = bad[0]
        raise CorruptFileError(
            f"{source}: worddict entries must map words to int ids in [0, 2**31) ({len(bad)} do not; "
            f"the first: {brief(word, 40)} -> {brief(index, 40)})"
        )
    return dict(options), dict(worddict)


def read_order_embedding(prefix: Path, *, cell: str | None = None) -> ConvertedOrderEmbedding:
    """Read and validate ``PREFIX.npz`` + ``PREFIX.pkl``; raise on any missing or mis-shaped parameter."""
    npz_path, pkl_path = Path(f"{prefix}.npz"), Path(f"{prefix}.pkl")
    options, worddict = _options(read_legacy_pickle(pkl_path), pkl_path)
    n_words, dim_word, dim, dim_image = (
        int_option(options, k, pkl_path) for k in ("n_words", "dim_word", "dim", "dim_image")
    )
    encoder = text_option(options, "encoder", pkl_path)
    # what the manifest records, checked here: str() / float() of a hostile value never ends or crashes
    text_option(options, "method", pkl_path, default="order")
    number_option(options, "margin", pkl_path, default=0.0)
    flag_option(options, "abs", pkl_path, default=False)
    with open_npz(npz_path) as npz:  # only the members the cell needs are read, after their headers check
        chosen, note = detect_cell(encoder, npz.keys, prefix="encoder", override=cell)
        expected = {
            "Wemb": (n_words, dim_word),
            "ff_image_W": (dim_image, dim),
            "ff_image_b": (dim,),
            **expected_cell_shapes("encoder", chosen, dim_word, dim),
        }
        check_params(npz.headers(expected), expected, source=str(npz_path))
        params = npz.arrays(expected)
        extras = extra_keys(npz.keys, expected)
    notes = [note] if note else []
    if extras:
        notes.append(f"ignored extra parameter(s) in {npz_path.name}: {', '.join(map(shown, extras))}")
    tensors = {
        "sentence.embedding.weight": params["Wemb"],
        **{f"sentence.rnn.cell.{k}": v for k, v in cell_state_dict(params, "encoder", chosen).items()},
        "image.proj.weight": np.ascontiguousarray(params["ff_image_W"].T),
        "image.proj.bias": params["ff_image_b"],
    }
    for n in notes:
        log.warning(n)
    sources = {npz_path.name: sha256_file(npz_path), pkl_path.name: sha256_file(pkl_path)}
    return ConvertedOrderEmbedding(chosen, options, worddict, tensors, notes, sources)


def write_order_embedding(
    model: ConvertedOrderEmbedding,
    out: Path,
    *,
    name: str,
    demo: bool = False,
    description: str = "",
    partial_rms: float = 1.0,
    extra: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the artifact directory; returns the manifest.

    ``partial_rms`` < 1 (pRMSNorm, trained models only) is recorded as ``cell_options.partial_rms``;
    ``extra`` adds top-level manifest sections (a trained model's ``training`` record).
    """
    opts = model.options
    manifest: dict[str, Any] = {
        "name": name,
        "family": ORDER_EMBEDDING.name,
        "demo": demo,
        "description": description,
        "converter_version": CONVERTER_VERSION,
        "cell": model.cell,
        "dims": {
            "n_words": int(opts["n_words"]),
            "dim_word": int(opts["dim_word"]),
            "dim": int(opts["dim"]),
            "dim_image": int(opts["dim_image"]),
            "output_dim": int(opts["dim"]),
        },
        "options": {
            "method": str(opts.get("method", "order")),
            "abs": bool(opts.get("abs", False)),
            "margin": float(opts.get("margin", 0.0)),
            "encoder_in_options": str(opts["encoder"]),
        },
        "tokenizer": ORDER_EMBEDDING.tokenizer,
        "defaults": dict(ORDER_EMBEDDING.defaults),
        "sources": model.sources,
        "notes": model.notes,
    }
    clash = set(extra or {}) & set(manifest)
    if clash:
        raise ValueError(f"extra manifest sections would replace {sorted(clash)}")
    manifest.update(extra or {})
    if partial_rms != 1.0:
        manifest["cell_options"] = {"partial_rms": float(partial_rms)}
    with staging_dir(out, overwrite=overwrite) as tmp:
        save_weights(tmp, model.tensors)
        write_json(tmp / VOCAB, {"worddict": model.worddict})
        return finish_manifest(tmp, manifest)


def write_legacy_order_embedding(
    prefix: Path,
    *,
    cell: str,
    options: dict[str, Any],
    worddict: dict[str, int],
    tensors: dict[str, np.ndarray],
) -> None:
    """Write ``PREFIX.npz`` + ``PREFIX.pkl`` exactly as the original trainer saved them: Theano-named
    (in, out) arrays, and a protocol-0 pickle of ``{'options', 'worddict': OrderedDict}`` (spec §5.2).

    ``tensors`` use the artifact's module names; ``options`` are the legacy option keys.
    """
    import collections
    import pickle

    params = {
        "Wemb": tensors["sentence.embedding.weight"],
        **legacy_cell_params(
            {k.removeprefix("sentence.rnn.cell."): v for k, v in tensors.items() if ".rnn.cell." in k},
            "encoder",
            cell,
        ),
        "ff_image_W": tensors["image.proj.weight"].T,
        "ff_image_b": tensors["image.proj.bias"],
    }
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in params.items()}
    np.savez(f"{prefix}.npz", **arrays)
    ordered = collections.OrderedDict(sorted(worddict.items(), key=lambda kv: kv[1]))
    with open(f"{prefix}.pkl", "wb") as f:
        pickle.dump({"options": dict(options), "worddict": ordered}, f, protocol=0)
