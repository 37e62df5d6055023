"""Every error the service can raise has a stable code and an HTTP status; one body shape."""

from __future__ import annotations

import json

import lnserve.app.galleries.errors  # loaded so the gallery errors are checked against the tree too
import lnserve.app.http.errors
import lnserve.app.pull.errors  # loaded so its error classes are checked too
import lnserve.app.serving.errors
from lnserve.app.http.errors import (
    ERROR_TABLE,
    HTTP_STATUSES,
    NOT_ANSWERED,
    error_response,
    http_error_codes,
    http_status,
)
from lnserve.app.runtime.errors import ProviderUnavailableError
from lnserve.converters.errors import UnsafePickleError
from lnserve.errors import LnserveError, UserInputError
from tests.support.error_tree import PAGE

# the error tree, generated from the errors modules (tests/docs/test_error_tree.py keeps it so)
TREE_PAGE = PAGE.read_text(encoding="utf-8")


def _subclasses(cls: type) -> set[type]:
    """The package's subclasses of ``cls`` (a test may define error classes of its own: not the tree)."""
    out = {sub for sub in cls.__subclasses__() if sub.__module__.startswith("lnserve.")}
    for sub in list(out):
        out |= _subclasses(sub)
    return out


def test_every_error_class_has_code_and_status() -> None:
    classes = _subclasses(LnserveError)
    assert {
        lnserve.app.serving.errors.ModelNotFoundError,
        lnserve.app.serving.errors.NotReadyError,
        lnserve.app.serving.errors.QueueFullError,
    } <= classes
    assert lnserve.app.galleries.errors.GalleryNotFoundError in classes
    for cls in classes:
        assert cls.code and cls.code == cls.code.lower() and " " not in cls.code, cls
        assert cls.code in HTTP_STATUSES or issubclass(cls, UserInputError), f"{cls.__name__}: no status"
        assert f"── {cls.__name__} " in TREE_PAGE, (
            f"{cls.__name__} missing from the error tree in docs/errors.md"
        )


def test_statuses_of_the_service_errors() -> None:
    assert http_status(lnserve.app.serving.errors.ModelNotFoundError("m")) == 404
    assert http_status(lnserve.app.serving.errors.RequestTooLargeError("m")) == 413
    assert http_status(lnserve.app.serving.errors.SentenceTooLongError("m")) == 422
    assert http_status(lnserve.app.serving.errors.TooManySentencesError("m")) == 422
    assert http_status(lnserve.app.serving.errors.UnauthorizedError("m")) == 401
    assert http_status(lnserve.app.serving.errors.QueueFullError("m")) == 429
    assert http_status(lnserve.app.serving.errors.NotReadyError("m")) == 503
    assert http_status(ProviderUnavailableError("m")) == 503
    assert http_status(UnsafePickleError("m")) == 422  # an unlisted input code is the caller's fault
    assert http_status(LnserveError("m")) == 500
    assert all(status >= 400 and code for status, code in ERROR_TABLE.values())


def test_error_body_shape_and_unencodable_text() -> None:
    resp = error_response(404, "model_not_found", "no model named '\ud800'", request_id="r1")
    body = json.loads(resp.body)
    assert body == {  # the lone surrogate is escaped, not dropped and not a 500
        "error": {"code": "model_not_found", "message": "no model named '\\ud800'", "request_id": "r1"}
    }


def test_a_corrupt_gallery_is_unavailable_not_an_internal_error() -> None:
    """503: the server is healthy and serves the other galleries; the CLI exits 2 with the reason."""
    err = lnserve.app.galleries.errors.GalleryCorruptError("g", "vectors.f32 is missing")
    assert (err.code, http_status(err), err.exit_code) == ("gallery_corrupt", 503, 2)
    assert str(err) == "gallery 'g' is corrupt: vectors.f32 is missing"
    assert err.reason == "vectors.f32 is missing"


def _defines(cls: type, attr: str) -> bool:
    return any(attr in vars(klass) for klass in cls.__mro__ if klass is not Exception)


def test_lower_layers_define_codes_only_the_app_owns_statuses() -> None:
    """One table: no error class carries an HTTP status, so a status can only change in ``HTTP_STATUSES``."""
    for cls in _subclasses(LnserveError) | {LnserveError}:
        assert not _defines(cls, "http_status"), f"{cls.__module__}.{cls.__name__} defines http_status"


def test_runtime_errors_live_in_the_runtime() -> None:
    import lnserve.converters.errors

    for name in ("EncodeInputError", "ProviderUnavailableError", "OnnxModelError"):
        assert not hasattr(lnserve.converters.errors, name), name
        assert getattr(lnserve.app.runtime.errors, name).__module__ == "lnserve.app.runtime.errors"


def test_the_status_table_is_the_list_of_answered_codes() -> None:
    """``HTTP_STATUSES`` is the one list: every error class of the service's modules has its row there (so
    the docs' errors table, read from ``http_error_codes()``, cannot miss
    it); answered codes are its rows."""
    import lnserve.app.http.server  # noqa: F401  # its bind errors stop the start: they answer no request

    service = ("lnserve.app.serving", "lnserve.app.galleries", "lnserve.app.http", "lnserve.app.runtime")
    start_up_only = {"model_load_failed", "onnx_model_invalid", "address_in_use", "bind_failed"}
    for cls in _subclasses(LnserveError):
        if cls.__module__.startswith(service) and cls.code not in start_up_only:
            assert cls.code in HTTP_STATUSES, f"{cls.__name__} ({cls.code}): no row in HTTP_STATUSES"
    answered = http_error_codes()
    assert set(answered) == set(HTTP_STATUSES) - NOT_ANSWERED
    assert all(HTTP_STATUSES[code] == status for code, status in answered.items())


def test_error_tree_draws_each_class_with_its_code_status_and_exit_code() -> None:
    """``error_tree`` (what docs/errors.md shows) draws a subtree too: nesting, code, HTTP status, exit."""
    lines = lnserve.app.http.errors.error_tree(lnserve.app.galleries.errors.GalleryError).splitlines()
    assert lines[0].split() == ["GalleryError", "gallery_error", "422", "exit", "2", "app.galleries.errors"]
    assert lines[1].split()[:4] == ["├──", "GalleryNotFoundError", "gallery_not_found", "404"]
    assert lines[-1].split()[:5] == ["└──", "InvalidItemIdError", "invalid_item_id", "422", "exit"]
    assert lines[-1].startswith("    └── ")  # under GalleryInputError, the last of GalleryError's
    assert len(lines) == 1 + len(_subclasses(lnserve.app.galleries.errors.GalleryError))
