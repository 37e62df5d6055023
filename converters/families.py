"""The model families, one object each: everything that differs between order-embeddings and skip-thoughts.

Code elsewhere asks the family (``family_of(name).text_only``, ``.stacked``, ``.metric``) instead of
comparing names, so a third family is one more ``Family`` in ``FAMILIES``. The name is the manifest's
``"family"`` string as it is on disk (and a gallery's): the artifact format does not change. It sits in
``converters`` because the artifact reader checks against it; the runtime, galleries, serving, commands and
pull all import converters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lnserve.errors import brief

from .errors import ManifestMismatchError

CAPTIONS, IMAGES = "captions", "images"  # what a gallery holds (``app.galleries.layout.KINDS``)


@dataclass(frozen=True, eq=False)
class Family:
    """What one model family is, as data: the runtime, the galleries and the commands read it. Each is one
    object in ``FAMILIES``, compared by identity (its tables are dicts, not hashable)."""

    name: str  # the manifest's "family", as on disk
    text_only: bool  # no image encoder: it encodes sentences only, its galleries hold captions only
    stacked: bool  # vectors concatenate separately encoded parts (uni, bi) over word tables ("parts");
    # else one sentence encoder over the embedding in its weights ("cell") and, unless text only, an image one
    method: str | None  # the scoring method it always uses; None: the manifest's options.method
    metric: str | None  # the score it always reports; None: the method's (``runtime.retrieval.metric_for``)
    tokenizer: str  # the tokeniser its converters record
    defaults: Mapping[str, bool]  # the eos / normalize defaults its converters record
    converters: tuple[str, ...]  # the converters that write it (``lnserve convert``, the pull catalog)
    trainable: bool  # ``lnserve train`` fine-tunes it
    evaluations: tuple[str, ...]  # the ``lnserve eval`` protocols that apply to it
    # the published rows its papers report, shown beside a model's scores (``app.evaluation.report``)
    reference: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @property
    def gallery_kinds(self) -> tuple[str, ...]:
        """What a gallery of this family's vectors may hold."""
        return (CAPTIONS,) if self.text_only else (IMAGES, CAPTIONS)

    def method_of(self, manifest: Mapping[str, Any]) -> str:
        """The scoring method of a model of this family."""
        return self.method if self.method is not None else str(manifest["options"]["method"])

    def cells(self, manifest: Mapping[str, Any]) -> list[str]:
        """The cell type of each recurrent part (no weights read)."""
        if self.stacked:
            return [info["cell"] for info in manifest["parts"].values()]
        return [manifest["cell"]]


RETRIEVAL_EVAL = "retrieval"  # ``lnserve eval``: caption <-> image retrieval (needs an image encoder)
TRANSFER_EVAL = "transfer"  # ``lnserve eval skip-thoughts``: the papers' transfer tasks (any model)

ORDER_EMBEDDING = Family(
    name="order-embedding",
    text_only=False,
    stacked=False,
    method=None,
    metric=None,
    tokenizer="coco",
    defaults={"eos": True, "normalize": True},
    converters=("order-embedding",),
    trainable=True,
    evaluations=(RETRIEVAL_EVAL, TRANSFER_EVAL),
)

SKIP_THOUGHTS = Family(
    name="skip-thoughts",
    text_only=True,
    stacked=True,
    method="cosine",
    metric="cosine",
    tokenizer="treebank",
    defaults={"eos": False, "normalize": True},
    converters=("skip-thoughts", "skip-thoughts-training"),
    trainable=False,
    evaluations=(TRANSFER_EVAL,),
    reference={
        "combine-skip (skip-thoughts paper)": {
            "sick-r.r": 0.8585,
            "sick-r.rho": 0.7916,
            "sick-r.mse": 0.2687,
            "mr.acc": 76.5,
            "cr.acc": 80.1,
            "subj.acc": 93.6,
            "mpqa.acc": 87.1,
            "trec.acc": 92.2,
            "msrp.acc": 75.8,
            "msrp.f1": 83.0,
        },
        "LN skip-thoughts, 1 month (layer-norm paper)": {
            "sick-r.r": 0.858,
            "sick-r.mse": 0.270,
            "mr.acc": 79.4,
            "cr.acc": 83.1,
            "subj.acc": 93.7,
            "mpqa.acc": 89.3,
            "trec.acc": 88.4,
        },
    },
)

# The registry of families, by name: every reader looks a family up here (a third family is one more entry).
FAMILIES: dict[str, Family] = {f.name: f for f in (ORDER_EMBEDDING, SKIP_THOUGHTS)}


def lookup(name_or_manifest: object) -> Family | None:
    """The family a name (a manifest's or a gallery's ``family``) or a manifest names; None for none we know
    (what an unchecked file says is never trusted: it may be anything, hashable or not)."""
    name = name_or_manifest.get("family") if isinstance(name_or_manifest, Mapping) else name_or_manifest
    return FAMILIES.get(name) if isinstance(name, str) else None


def family_of(name_or_manifest: str | Mapping[str, Any]) -> Family:
    """The family a name or a manifest names (``lookup``), for what has been checked already.

    Raises:
        ManifestMismatchError: no such family.
    """
    family = lookup(name_or_manifest)
    if family is None:
        name = name_or_manifest.get("family") if isinstance(name_or_manifest, Mapping) else name_or_manifest
        raise ManifestMismatchError(f"unknown family {brief(name, 60)}")
    return family


def has_image_encoder(name_or_manifest: object) -> bool:
    """Whether the family named (or a manifest's, unchecked) encodes images; False for an unknown one."""
    family = lookup(name_or_manifest)
    return family is not None and not family.text_only


def may_hold(family_name: object, kind: object) -> bool:
    """Whether a gallery of ``family_name``'s vectors may hold ``kind``; False for an unknown family (read
    from disk, never trusted: it is refused as such)."""
    family = lookup(family_name)
    return family is not None and kind in family.gallery_kinds
