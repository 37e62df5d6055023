"""``model_identity``: what galleries pin. It follows what determines the vectors (weights, vocabulary,
tables, cell, options, tokenizer, defaults) and nothing else: `lnserve export` never orphans a gallery."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lnserve.app.runtime.onnx_export import export_onnx
from lnserve.converters.artifact import MANIFEST, model_identity, unexported_manifest_sha256


def _manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / MANIFEST).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["oe_order_lngru", "skipthoughts_gru"])
def test_export_keeps_the_identity_and_the_old_manifest_is_recognised(
    name: str, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    model = tmp_path / name
    shutil.copytree(artifacts[name], model)
    before_bytes = (model / MANIFEST).read_bytes()
    before = _manifest(model)
    assert unexported_manifest_sha256(before) is None
    export_onnx(model)
    after = _manifest(model)
    assert (model / MANIFEST).read_bytes() != before_bytes and "onnx" in after
    assert model_identity(after) == model_identity(before)
    assert unexported_manifest_sha256(after) == hashlib.sha256(before_bytes).hexdigest()
    export_onnx(model, form="loop")  # a second export (another graph form) changes nothing either
    assert model_identity(_manifest(model)) == model_identity(before)
    assert unexported_manifest_sha256(_manifest(model)) == hashlib.sha256(before_bytes).hexdigest()


def _changed(manifest: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_identity_follows_what_changes_vectors_only(artifacts: dict[str, Path]) -> None:
    m = _manifest(artifacts["oe_order_lngru"])
    base = model_identity(m)
    vector_relevant = [
        (("files", "weights.safetensors", "sha256"), "0" * 64),
        (("files", "vocab.json", "sha256"), "1" * 64),
        (("cell",), "gru"),
        (("options", "method"), "cosine"),
        (("options", "abs"), not m["options"]["abs"]),
        (("defaults", "eos"), not m["defaults"]["eos"]),
        (("tokenizer",), "treebank"),
        (("dims", "dim"), m["dims"]["dim"] + 1),
        (("cell_options",), {"partial_rms": 0.5}),
    ]
    for path, value in vector_relevant:
        assert model_identity(_changed(m, path, value)) != base, path
    provenance = [
        (("name",), "renamed"),
        (("description",), "another text"),
        (("notes",), ["a note"]),
        (("options", "margin"), 0.5),
        (("converter_version",), "9.9.9"),
        (("pull",), {"origin": "elsewhere"}),
        (("onnx",), {"opset": 18}),
        (("files", "onnx/sentence.onnx"), {"sha256": "2" * 64, "bytes": 1}),
    ]
    for path, value in provenance:
        assert model_identity(_changed(m, path, value)) == base, path
