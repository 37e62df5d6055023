"""The errors of ``lnserve eval``: a set's files unusable (``EvalDataError``, CLI exit 2), and the two
``ValueError``s the protocols raise inside and turn into it. The whole tree: docs/errors.md."""

from __future__ import annotations

from lnserve.errors import UserInputError


class EvalDataError(UserInputError):
    """An evaluation set's file is missing or not in its distribution format."""

    code = "eval_data"


class TooFewItems(ValueError):
    """A set too small for its folds (the original KFold refused it too)."""


class DegenerateSplit(ValueError):
    """Data a protocol cannot score although each file is well formed: a training split holding one class
    only (liblinear refuses it), or scores that are all equal (a correlation with a constant is undefined)."""
