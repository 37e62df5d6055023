"""The service's own errors (raised by the registry, the batcher and the request path); their HTTP statuses
live in ``app.http.errors``."""

from __future__ import annotations

from lnserve.errors import LnserveError, UserInputError

from ...converters.errors import ArtifactError


class TooManySentencesError(UserInputError):
    """More sentences (or image rows) than ``max_sentences`` in one request."""

    code = "too_many_sentences"

    @classmethod
    def check(cls, n: int, limit: int, what: str = "items") -> None:
        """The one place the per-request count limit is enforced (encode, galleries, retrieve)."""
        if n > limit:
            raise cls(f"{n} {what} in one request; the limit is {limit} (max_sentences)")


class SentenceTooLongError(UserInputError):
    """A sentence has more tokens than ``max_tokens`` and the request did not ask to truncate."""

    code = "sentence_too_long"


class ModelNotFoundError(UserInputError):
    """No loaded model has that name."""

    code = "model_not_found"


class RequestTooLargeError(UserInputError):
    """The request body exceeds ``max_body_bytes``."""

    code = "request_too_large"


class UnauthorizedError(UserInputError):
    """An API key is configured and the request did not present it."""

    code = "unauthorized"


class ModelLoadError(ArtifactError):
    """A model could not be loaded while the server started (``lnserve serve`` exits 2)."""

    code = "model_load_failed"


class NotReadyError(LnserveError):
    """Models are still loading or warming up (or failed to)."""

    code = "not_ready"


class OverloadedError(LnserveError):
    """``max_inflight`` requests are in flight, or this client has ``max_body_reads_per_client`` bodies
    still arriving: refused at once (middleware)."""

    code = "overloaded"


class ClientClosedError(LnserveError):
    """The client disconnected before its result was ready."""

    code = "client_closed_request"
