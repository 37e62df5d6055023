"""The service's own errors (raised by the registry, the batcher and the request path); their HTTP statuses
live in ``app.http.errors``. The whole tree, generated from the code: docs/errors.md."""

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


class QueueFullError(LnserveError):
    """The model's queue is full: retry after ``retry_after`` seconds."""

    code = "queue_full"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDownError(LnserveError):
    """The batcher is draining for shutdown and takes no new work."""

    code = "shutting_down"


class ModelUnavailableError(LnserveError):
    """The model's batcher has stopped after an internal failure: it takes no work until a restart."""

    code = "model_unavailable"


class DeadlineExceededError(LnserveError):
    """The job waited in the queue past its deadline: dropped unrun (its client has likely given up)."""

    code = "deadline_exceeded"


class BatchError(LnserveError):
    """A batch could not be completed (a failing model or a bug); the job has no result (HTTP 500)."""


class ReloadFailedError(LnserveError):
    """``POST /models/NAME/reload`` could not load, check or warm the new version: the old one serves on."""

    code = "reload_failed"


class ReloadBusyError(LnserveError):
    """``serve --ray``: another replica's reload of this model is staged here and not yet committed. At most
    two versions of a model are resident (the serving one and one staged or retiring), so this one is
    refused rather than loaded as a third; retry when that reload has answered."""

    code = "reload_in_progress"


class ModelRenamedError(LnserveError):
    """The new version's manifest names the model differently: a served model keeps its name (clients
    address it by name) until a restart, so the reload is refused and the old version serves on."""

    code = "model_renamed"
