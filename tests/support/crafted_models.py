"""Crafted model artifacts (copies of the demo model, edited and re-hashed) that load and warm up fine but
misbehave on particular inputs, as a broken or hostile checkpoint would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file, save_file

from lnserve.app.demo_model.data import ensure_demo_artifact
from lnserve.app.runtime.onnx_export import export_onnx
from lnserve.converters.artifact import MANIFEST, WEIGHTS, write_json
from lnserve.converters.order_embedding import ConvertedOrderEmbedding, write_order_embedding
from lnserve.hashing import sha256_file

SILENT_WORD = "red"  # in the silent-word model, a sentence of only this word keeps a zero state


def _copy_demo(out: Path, name: str) -> Path:
    shutil.copytree(ensure_demo_artifact(), out)
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    manifest["name"] = name
    write_json(out / MANIFEST, manifest)
    return out


def _rehash(artifact: Path, *files: str) -> None:
    """Record the edited files' sha256 and size in the manifest, as a converter would have."""
    manifest = json.loads((artifact / MANIFEST).read_text(encoding="utf-8"))
    for rel in files:
        path = artifact / rel
        manifest["files"][rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    write_json(artifact / MANIFEST, manifest)


def silent_word_model(out: Path) -> Path:
    """LN-GRU whose update gate is exactly 1.0 (the state never moves from zero) for ``SILENT_WORD`` and
    ``<eos>``, and exactly 0.0 for every other word. A sentence of only the silent word therefore ends with
    h = 0: its L2 norm is 0 and it has no direction. The warm-up sentence has other words, so the model
    loads and warms up."""
    _copy_demo(out, "silent-word")
    vocab = json.loads((out / "vocab.json").read_text(encoding="utf-8"))["worddict"]
    t = load_file(str(out / WEIGHTS))
    n_words, dim_word = t["sentence.embedding.weight"].shape
    d = t["sentence.rnn.cell.weight_hh"].shape[1]
    v = np.zeros(dim_word, np.float32)
    v[0] = 1.0
    emb = np.tile(-v, (n_words, 1))  # every word: -v ...
    emb[[0, vocab[SILENT_WORD]]] = v  # ... but <eos> (id 0) and the silent word: +v
    emb[:, 1:] = np.random.default_rng(0).normal(0, 0.5, (n_words, dim_word - 1))  # candidates differ
    t["sentence.embedding.weight"] = emb
    w_ih = np.zeros((3 * d, dim_word), np.float32)
    w_ih[:d, 0], w_ih[d : 2 * d, 0] = -1.0, 1.0  # r gets -x0, u gets +x0: after the norm, -/+1 for +v
    w_ih[2 * d :, 1:] = np.random.default_rng(1).normal(0, 1.0, (d, dim_word - 1))
    t["sentence.rnn.cell.weight_ih"] = w_ih
    t["sentence.rnn.cell.bias_ih"] = np.zeros(3 * d, np.float32)
    t["sentence.rnn.cell.weight_hh"] = np.zeros((3 * d, d), np.float32)
    t["sentence.rnn.cell.norm_ih_ru.weight"] = np.full(2 * d, 60.0, np.float32)  # sigmoid(+-60) = 1.0 / 0.0
    t["sentence.rnn.cell.norm_ih_ru.bias"] = np.zeros(2 * d, np.float32)
    t["sentence.rnn.cell.norm_hh_ru.bias"] = np.zeros(2 * d, np.float32)
    t["sentence.rnn.cell.norm_ih_c.bias"] = np.full(d, 0.5, np.float32)
    save_file(t, str(out / WEIGHTS))
    _rehash(out, WEIGHTS)
    return out


def batch_of_one_model(out: Path) -> Path:
    """An exported ONNX sentence graph that only runs one sentence at a time (it reshapes to [1, d], as a
    faulty exporter might): the one-sentence warm-up passes, two sentences fail inside onnxruntime."""
    _copy_demo(out, "batch-of-one")
    manifest = export_onnx(out)
    entry = manifest["onnx"]["graphs"]["sentence"]
    d = manifest["dims"]["dim"]
    dim_word = manifest["dims"]["dim_word"]
    weight = np.random.default_rng(0).normal(0, 0.3, (dim_word, d)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes0"], ["mean"], keepdims=0),  # (B, dim_word)
        helper.make_node("MatMul", ["mean", "w"], ["proj"]),  # (B, d)
        helper.make_node("Tanh", ["proj"], ["act"]),
        helper.make_node("Reshape", ["act", "one_by_d"], ["h"]),  # (1, d): fails for B > 1
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([1, d], np.int64), "one_by_d"),
    ]
    graph = helper.make_graph(
        nodes,
        "batch_of_one",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "B", dim_word]),
            helper.make_tensor_value_info("lengths", TensorProto.INT64, ["B"]),
        ],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["B", d])],
        inits,
    )
    exported = onnx.load(str(out / entry["file"]))
    model = helper.make_model(graph, opset_imports=exported.opset_import, ir_version=exported.ir_version)
    onnx.save(model, str(out / entry["file"]))
    _rehash(out, entry["file"])
    return out


def unbuildable_model(out: Path) -> Path:
    """A model whose files all match its manifest but whose exported ONNX sentence graph is not a graph:
    it passes the artifact check and fails only when onnxruntime builds the session."""
    _copy_demo(out, "unbuildable")
    manifest = export_onnx(out)
    rel = manifest["onnx"]["graphs"]["sentence"]["file"]
    (out / rel).write_bytes(b"this is not an ONNX graph")
    _rehash(out, rel)
    return out


def zero_image_bias_model(out: Path) -> Path:
    """The demo model with a zero image-projection bias (as a checkpoint may have): an all-zero feature row
    projects to the zero vector, which has no direction."""
    _copy_demo(out, "zero-image-bias")
    t = load_file(str(out / WEIGHTS))
    t["image.proj.bias"] = np.zeros_like(t["image.proj.bias"])
    save_file(t, str(out / WEIGHTS))
    _rehash(out, WEIGHTS)
    return out


def published_size_order_model(
    out: Path, name: str, *, n_words: int = 20000, dim_word: int = 300, dim: int = 1024, dim_image: int = 4096
) -> Path:
    """An LN-GRU order-embedding artifact of the published model's size (300-d words, 1024-d sentences,
    4096-d VGG features; about 57 MB of weights, some 130 MB resident once served), random weights: for
    soaks that must see what one real version costs in memory. Every call writes the same weights."""
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)

    tensors = {
        "sentence.embedding.weight": w(n_words, dim_word),
        "sentence.rnn.cell.weight_ih": w(3 * dim, dim_word),
        "sentence.rnn.cell.bias_ih": np.zeros(3 * dim, np.float32),
        "sentence.rnn.cell.weight_hh": w(3 * dim, dim),
        "sentence.rnn.cell.norm_ih_ru.weight": np.ones(2 * dim, np.float32),
        "sentence.rnn.cell.norm_ih_ru.bias": np.zeros(2 * dim, np.float32),
        "sentence.rnn.cell.norm_ih_c.weight": np.ones(dim, np.float32),
        "sentence.rnn.cell.norm_ih_c.bias": np.zeros(dim, np.float32),
        "sentence.rnn.cell.norm_hh_ru.weight": np.ones(2 * dim, np.float32),
        "sentence.rnn.cell.norm_hh_ru.bias": np.zeros(2 * dim, np.float32),
        "sentence.rnn.cell.norm_hh_c.weight": np.ones(dim, np.float32),
        "sentence.rnn.cell.norm_hh_c.bias": np.zeros(dim, np.float32),
        "image.proj.weight": w(dim, dim_image),
        "image.proj.bias": np.zeros(dim, np.float32),
    }
    words = ["a", "red", "circle", "on", "the", "left"]  # ids 0 and 1 are eos and UNK, as in the legacy files
    worddict = {word: i for i, word in enumerate(words, 2)}
    worddict.update({f"w{i}": i for i in range(len(words) + 2, n_words)})
    options = {
        "encoder": "lngru",
        "n_words": n_words,
        "dim_word": dim_word,
        "dim": dim,
        "dim_image": dim_image,
        "method": "order",
        "abs": True,
        "margin": 0.05,
    }
    model = ConvertedOrderEmbedding(
        "lngru", options, worddict, tensors, ["published-size, random weights"], {}
    )
    write_order_embedding(model, out, name=name)
    return out
