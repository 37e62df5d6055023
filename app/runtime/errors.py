"""Errors the runtime raises while loading or running an exported model (codes only; ``app.http.errors`` maps
them to HTTP statuses, the CLI exits with ``exit_code``).

LnserveError
├── ProviderUnavailableError       (provider_unavailable) strict mode did not get the asked provider (exit 2)
└── UserInputError
    ├── ArtifactError
    │   └── OnnxModelError         (onnx_model_invalid) exported graph missing, corrupt or incompatible
    └── EncodeInputError           (invalid_input)     text / features given to an encoder are unusable
"""

from __future__ import annotations

from lnserve.errors import LnserveError, UserInputError

from ...converters.errors import ArtifactError


class EncodeInputError(UserInputError):
    """Text or features handed to an encoder are unusable."""

    code = "invalid_input"


class ProviderUnavailableError(LnserveError):
    """Strict mode asked for an execution provider (e.g. CUDA) that the session did not get: the
    configuration asks for more than this machine has."""

    code = "provider_unavailable"
    exit_code = 2


class OnnxModelError(ArtifactError):
    """An exported ONNX graph is missing, corrupt, or from an incompatible exporter version."""

    code = "onnx_model_invalid"
