"""``ModelRef``: the identity of a served model, as galleries pin it and the registry reports it.

It lives in the runtime, beside the engine that opens artifacts, so that the registry and the gallery store
both use it without one importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from lnserve.hashing import sha256_file

from ...converters.artifact import MANIFEST, model_identity, unexported_manifest_sha256
from ...converters.families import family_of
from ...converters.int8_calibration import calibration_tag
from .precisions import EXACT, check_precision, pinned_precision, with_precision


class PinnedModel(Protocol):
    """What a gallery records of the model that embedded it (``GalleryInfo`` has these)."""

    @property
    def kind(self) -> str: ...

    @property
    def model_identity(self) -> str | None: ...

    @property
    def model_sha256(self) -> str: ...


@dataclass(frozen=True)
class ModelRef:
    """The identity of the model that embeds a gallery's items: queries must come from the same one."""

    name: str
    identity: str  # converters.artifact.model_identity: weights, vocabulary, cell, options
    family: str
    method: str
    dim: int
    manifest_sha256: str = ""  # of manifest.json now (recorded with new galleries, for information)
    legacy_pins: frozenset[str] = frozenset()  # manifest sha256s galleries made before identities pinned
    precision: str = EXACT  # the served profile (``runtime.precisions``)
    calibration: str | None = None  # int8: the tag of the artifact's calibration, if it has one

    @classmethod
    def from_artifact(cls, artifact: Any, precision: str = EXACT) -> ModelRef:
        m = artifact.manifest
        method = family_of(m).method_of(m)
        manifest_sha = sha256_file(artifact.path / MANIFEST)
        before_export = unexported_manifest_sha256(m)
        return cls(
            name=artifact.name,
            identity=model_identity(m),
            family=artifact.family,
            method=method,
            dim=int(m["dims"]["output_dim"]),
            manifest_sha256=manifest_sha,
            legacy_pins=frozenset(p for p in (manifest_sha, before_export) if p),
            precision=check_precision(precision),
            calibration=calibration_tag(m) if precision == "int8" else None,
        )

    def identity_for(self, kind: str) -> str:
        """What a gallery of ``kind`` pins: the identity with the precision its vectors were made in (an
        int8 caption gallery is not searched by fp32 queries; image galleries are the same in fp32, int8
        and bf16, whose image projection is float32; a calibrated int8 pin names its calibration)."""
        return with_precision(self.identity, pinned_precision(self.precision, kind), self.calibration)

    def matches(self, info: PinnedModel) -> bool:
        """Whether this model made the gallery's vectors: the same identity; for a gallery made before
        identities existed, the manifest it pinned is this model's (now, or before ``lnserve export``),
        served so that its vectors are float32 ones."""
        if info.model_identity is not None:
            return info.model_identity == self.identity_for(info.kind)
        return info.model_sha256 in self.legacy_pins and pinned_precision(self.precision, info.kind) == EXACT
