"""Errors of the runtime layer (codes only; ``app.http.errors`` maps them to HTTP statuses, the CLI exits
with ``exit_code``): an exported model that cannot load or run, input an encoder cannot use, a provider
strict mode did not get. The whole tree, generated from the code: docs/errors.md.
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
