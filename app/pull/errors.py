"""Errors raised while pulling a published checkpoint set. All are ``UserInputError``s (CLI exit 2): the
network, the remote host or the files are at fault, not lnserve. The whole tree, generated from the code:
docs/errors.md.
"""

from __future__ import annotations

from lnserve.errors import UserInputError


class PullError(UserInputError):
    """A download could not be completed (HTTP error, repeated connection failures)."""

    code = "download_failed"


class OfflineError(PullError):
    """No connection to the host could be opened (DNS failure, refused, unreachable)."""

    code = "offline"


class RemoteNotFoundError(PullError):
    """The host does not have the file (HTTP 404 or 410)."""

    code = "not_found"


class TruncatedDownloadError(PullError):
    """The body kept ending before its announced length; the ``.part`` file is kept for a later resume."""

    code = "truncated"


class StalledDownloadError(PullError):
    """The server kept sending almost nothing (a connection held open by a trickle of bytes); what it sent
    is not kept."""

    code = "stalled"


class DeadlineExceededError(PullError):
    """The whole pull ran past its overall deadline; the file being downloaded is not kept."""

    code = "deadline_exceeded"


class ChecksumMismatchError(PullError):
    """The downloaded file is not the one the catalog (or ``--sha256``) names."""

    code = "checksum_mismatch"


class UnsafeArchiveError(PullError):
    """An archive lacks a member the catalog names, or the member is not a plain file."""

    code = "unsafe_archive"


class MissingFilesError(PullError):
    """``--from DIR`` does not hold every file of the set."""

    code = "missing_files"


class UnknownCatalogEntryError(PullError):
    """The requested name is not in the catalog."""

    code = "unknown_model"


class UnpublishedFileError(PullError):
    """The set cannot be converted from its published files alone (the LN skip-thoughts release has no
    dictionary): the user must supply the missing file; nothing was downloaded."""

    code = "unpublished_file"
