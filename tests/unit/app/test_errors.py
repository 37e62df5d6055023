"""Every error the service can raise has a stable code and an HTTP status; one body shape."""

from __future__ import annotations

import json
import sys

import lnserve.app.batcher
import lnserve.app.errors
import lnserve.app.galleries.errors  # loaded so the gallery errors are checked against the tree too
import lnserve.app.pull.errors  # loaded so its error classes are checked too
from lnserve.app.errors import ERROR_TABLE, error_response
from lnserve.converters.errors import LnserveError


def _subclasses(cls: type) -> set[type]:
    out = set(cls.__subclasses__())
    for sub in list(out):
        out |= _subclasses(sub)
    return out


def test_every_error_class_has_code_and_status() -> None:
    classes = _subclasses(LnserveError)
    assert {
        lnserve.app.errors.ModelNotFoundError,
        lnserve.app.errors.NotReadyError,
        lnserve.app.batcher.QueueFullError,
    } <= classes
    assert lnserve.app.galleries.errors.GalleryNotFoundError in classes
    for cls in classes:
        assert cls.code and cls.code == cls.code.lower() and " " not in cls.code, cls
        assert 400 <= cls.http_status < 600, cls
        doc = (sys.modules[cls.__module__].__doc__ or "") + (lnserve.app.errors.__doc__ or "")
        assert cls.code in doc, f"{cls.__name__} missing from the error tree in {cls.__module__}'s docstring"


def test_statuses_of_the_service_errors() -> None:
    assert lnserve.app.errors.ModelNotFoundError.http_status == 404
    assert lnserve.app.errors.RequestTooLargeError.http_status == 413
    assert lnserve.app.errors.SentenceTooLongError.http_status == 422
    assert lnserve.app.errors.TooManySentencesError.http_status == 422
    assert lnserve.app.errors.UnauthorizedError.http_status == 401
    assert lnserve.app.batcher.QueueFullError.http_status == 429
    assert lnserve.app.errors.NotReadyError.http_status == 503
    assert all(status >= 400 and code for status, code in ERROR_TABLE.values())


def test_error_body_shape_and_unencodable_text() -> None:
    resp = error_response(404, "model_not_found", "no model named '\ud800'", request_id="r1")
    body = json.loads(resp.body)
    assert body == {
        "error": {"code": "model_not_found", "message": body["error"]["message"], "request_id": "r1"}
    }
