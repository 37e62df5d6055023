"""Errors raised while pulling a published checkpoint set. All are ``UserInputError``s (CLI exit 2): the
network, the remote host or the files are at fault, not lnserve.

PullError                      (download_failed)    a download could not be completed
├── OfflineError               (offline)            no connection to the host could be opened at all
├── RemoteNotFoundError        (not_found)          the host answered 404 / 410 for a file
├── TruncatedDownloadError     (truncated)          the body ended before the announced length, every try
├── StalledDownloadError       (stalled)            under 1 KiB arrived in --stall-timeout, every try
├── DeadlineExceededError      (deadline_exceeded)  the whole download took longer than --deadline
├── ChecksumMismatchError      (checksum_mismatch)  the file's sha256 (or size) differs from the catalog's
├── UnsafeArchiveError         (unsafe_archive)     an archive member is missing or not a plain file
├── MissingFilesError          (missing_files)      ``--from DIR`` lacks files of the set
├── UnknownCatalogEntryError   (unknown_model)      the name is not in the catalog
└── UnpublishedFileError       (unpublished_file)   the set needs a file that was never published
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
