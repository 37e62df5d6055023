"""The converters' errors: a legacy checkpoint that cannot be read faithfully (``ConversionError`` and its
kinds) and a converted model directory that is unusable (``ArtifactError``), all the caller's input (CLI
exit 2); and ``JsonBoundsError``, the ``ValueError`` of ``bounded_json``. Every error carries a stable
snake_case ``code`` used by HTTP and the CLI; the HTTP status of each code is the app's business (one table
in ``app.http.errors``). The whole tree, generated from the code: docs/errors.md.
"""

from __future__ import annotations

from lnserve.errors import UserInputError


class ConversionError(UserInputError):
    """A legacy checkpoint cannot be converted faithfully."""

    code = "conversion_error"


class UnsafePickleError(ConversionError):
    """A pickle references a global outside the allow-list; nothing from it was executed."""

    code = "unsafe_pickle"


class CorruptFileError(ConversionError):
    """A file is truncated, not in the expected format, or unreadable."""

    code = "corrupt_file"


class MissingParameterError(ConversionError):
    """A parameter the cell needs is absent (the original loader silently kept random weights)."""

    code = "missing_parameter"


class ShapeMismatchError(ConversionError):
    """A parameter's shape or dtype differs from what the options imply."""

    code = "shape_mismatch"


class UnknownCellTypeError(ConversionError):
    """The options and the keys present match no known cell type."""

    code = "unknown_cell_type"


class TableMismatchError(ConversionError):
    """Skip-thoughts tables and dictionary disagree."""

    code = "table_mismatch"


class ArtifactError(UserInputError):
    """A converted model directory cannot be used."""

    code = "artifact_error"


class ArtifactVersionError(ArtifactError):
    """The artifact was written in a newer format than this lnserve reads."""

    code = "artifact_version"


class ManifestMismatchError(ArtifactError):
    """The artifact's files do not match its manifest (tampered or corrupt)."""

    code = "manifest_mismatch"


class JsonBoundsError(ValueError):
    """The JSON is nested too deeply, too large, or not in a regular file."""
