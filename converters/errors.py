"""The lnserve exception tree. Every error carries a stable snake_case ``code`` used by HTTP and the CLI, and
the CLI's ``exit_code``; the HTTP status of each code is the app's business (one table in
``app.http.errors``).

LnserveError                       (internal_error)    unexpected failure: CLI exit 1
├── StorageFullError               (storage_full)      the disk, a quota or the file-size limit is full
└── UserInputError                 (invalid_input)     the caller's input is wrong: CLI exit 2
    ├── ConversionError            (conversion_error)  a legacy checkpoint cannot be read faithfully
    │   ├── UnsafePickleError      (unsafe_pickle)     a pickle names a global outside the allow-list
    │   ├── CorruptFileError       (corrupt_file)      truncated / unreadable file
    │   ├── MissingParameterError  (missing_parameter) a parameter the cell needs is absent
    │   ├── ShapeMismatchError     (shape_mismatch)    a parameter has the wrong shape or dtype
    │   ├── UnknownCellTypeError   (unknown_cell_type) options + keys match no known cell
    │   └── TableMismatchError     (table_mismatch)    word table rows != dictionary lines
    ├── ArtifactError              (artifact_error)    a converted model directory is unusable
    │   ├── ArtifactVersionError   (artifact_version)  written by a newer lnserve
    │   └── ManifestMismatchError  (manifest_mismatch) files do not match what the manifest says
    └── (the runtime's errors: ``lnserve.app.runtime.errors``)
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
