"""Fetch one file over HTTP(S) with httpx: stream into ``NAME.part``, resume it with a Range request after a
cut connection, retry with exponential backoff and jitter, hash while streaming, then rename atomically.

A final ``NAME`` therefore only ever exists complete (and verified, when a sha256 is known). A ``NAME.part``
left behind by a failure is kept on purpose: the next run resumes from it.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from lnserve.app.pull.errors import (
    ChecksumMismatchError,
    OfflineError,
    PullError,
    RemoteNotFoundError,
    TruncatedDownloadError,
)
from lnserve.hashing import sha256_file

Progress = Callable[[int, int | None], None]  # (bytes so far, total bytes or None)

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
USER_AGENT = "lnserve-pull/1"


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; the wait before try n+1 is ``backoff * 2**n`` (jittered, capped at ``cap``)
    so that a flaky mirror is not hammered."""

    attempts: int = 5
    backoff: float = 1.0
    cap: float = 30.0

    def wait(self, attempt: int) -> float:
        return min(self.cap, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)


@dataclass
class Downloaded:
    """A complete file and what was checked about it."""

    path: Path
    url: str
    sha256: str
    bytes: int
    verified: bool  # the sha256 matched an expected value
    resumed: bool  # some bytes came from an earlier, interrupted try


class _Retry(Exception):
    """One try failed in a way another try may fix."""

    def __init__(self, reason: str, *, connected: bool, short: bool = False) -> None:
        super().__init__(reason)
        self.connected, self.short = connected, short


class _Partial:
    """The ``.part`` file and a running sha256 of its bytes, kept in step across tries."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.digest = hashlib.sha256()
        self.hashed = 0
        self.resumed = False

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def reset(self) -> None:
        self.path.unlink(missing_ok=True)
        self.digest, self.hashed = hashlib.sha256(), 0

    def sync_digest(self) -> None:
        """Hash what is already on disk (a part left by an earlier run) before appending to it."""
        if self.hashed == self.size():
            return
        self.digest, self.hashed = hashlib.sha256(), 0
        with self.path.open("rb") as f:
            while block := f.read(1 << 20):
                self.digest.update(block)
                self.hashed += len(block)


def download(
    url: str,
    dest: Path,
    *,
    client: httpx.Client,
    sha256: str | None = None,
    size: int | None = None,
    retry: RetryPolicy = RetryPolicy(),
    progress: Progress | None = None,
) -> Downloaded:
    """Download ``url`` to ``dest`` (reusing a complete ``dest`` from an earlier run).

    Raises:
        OfflineError: no try could connect to the host.
        RemoteNotFoundError: HTTP 404 / 410.
        TruncatedDownloadError: the body ended early on every try (``dest.part`` is kept for a resume).
        ChecksumMismatchError: the complete file has the wrong sha256 or size (nothing is kept).
        PullError: any other HTTP error, or repeated failures.
    """
    if dest.is_file():
        digest = sha256_file(dest)
        if sha256 is None or digest == sha256.lower():
            return Downloaded(dest, url, digest, dest.stat().st_size, sha256 is not None, resumed=False)
        dest.unlink()  # a stale or corrupt earlier download: fetch it again
    part = _Partial(dest.with_name(dest.name + ".part"))
    failures: list[_Retry] = []
    for attempt in range(retry.attempts):
        if attempt:
            time.sleep(retry.wait(attempt - 1))
        try:
            _try_once(client, url, part, progress)
            break
        except _Retry as exc:
            failures.append(exc)
    else:
        raise _final_error(url, dest, failures)
    return _finish(url, dest, part, sha256=sha256, size=size)


def _try_once(client: httpx.Client, url: str, part: _Partial, progress: Progress | None) -> None:
    offset = part.size()
    headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    total: int | None = None
    try:
        with client.stream("GET", url, headers=headers) as resp:
            offset, total = _start(resp, url, part, offset)
            part.sync_digest()
            with part.path.open("ab") as f:
                for chunk in resp.iter_raw():  # no chunk_size: a sized chunker would drop bytes on a cut
                    f.write(chunk)
                    part.digest.update(chunk)
                    part.hashed += len(chunk)
                    if progress:
                        progress(part.hashed, total)
                f.flush()
                os.fsync(f.fileno())
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _Retry(f"cannot connect ({_reason(exc)})", connected=False) from None
    except httpx.TransportError as exc:
        got = part.size()
        short = total is not None and got < total
        detail = f"received {got} of {total} bytes" if short else _reason(exc)
        raise _Retry(f"connection lost ({detail})", connected=True, short=short) from None
    got = part.size()
    if total is not None and got != total:
        raise _Retry(f"received {got} of {total} bytes", connected=True, short=got < total)


def _start(resp: httpx.Response, url: str, part: _Partial, offset: int) -> tuple[int, int | None]:
    """Check the status and decide where the body goes; returns (offset, expected total size)."""
    status = resp.status_code
    if status in (404, 410):
        raise RemoteNotFoundError(
            f"{url}: HTTP {status}: the host does not have this file (if it moved, fetch it from a mirror "
            "with --base-url URL, or download it elsewhere and use --from DIR)"
        )
    if status == 416 and offset:  # the part is longer than the remote file: it cannot be trusted
        part.reset()
        raise _Retry("HTTP 416 for the resume range; starting over", connected=True)
    if status in _RETRY_STATUS:
        raise _Retry(f"HTTP {status}", connected=True)
    if status == 206 and offset:
        match = _CONTENT_RANGE.fullmatch(resp.headers.get("Content-Range", "").strip())
        if match and int(match[1]) == offset:
            part.resumed = True
            return offset, int(match[3]) if match[3] != "*" else None
        part.reset()
        raise _Retry("the server resumed at another offset; starting over", connected=True)
    if status == 200:
        if offset:
            part.reset()  # the server ignored the Range header: start from zero
        length = resp.headers.get("Content-Length")
        return 0, int(length) if length and length.isdigit() else None
    raise PullError(f"{url}: HTTP {status} {resp.reason_phrase}".rstrip())


def _finish(url: str, dest: Path, part: _Partial, *, sha256: str | None, size: int | None) -> Downloaded:
    part.sync_digest()
    digest, nbytes = part.digest.hexdigest(), part.hashed
    problems = []
    if sha256 is not None and digest != sha256.lower():
        problems.append(f"sha256 {digest}, expected {sha256.lower()}")
    if size is not None and nbytes != size:
        problems.append(f"{nbytes} bytes, expected {size}")
    if problems:
        part.reset()  # complete but wrong: resuming it could never help
        raise ChecksumMismatchError(
            f"{dest.name} from {url}: {'; '.join(problems)} (the file is corrupt or changed upstream; "
            "nothing was kept. Run again to re-download, or pass --sha256 NAME=HEX if the new file is "
            "trusted)"
        )
    os.replace(part.path, dest)
    return Downloaded(dest, url, digest, nbytes, verified=sha256 is not None, resumed=part.resumed)


def _final_error(url: str, dest: Path, failures: list[_Retry]) -> PullError:
    last, tries = failures[-1], len(failures)
    host = httpx.URL(url).host
    if not any(f.connected for f in failures):
        return OfflineError(
            f"cannot reach {host} after {tries} tries ({last}); check the network or proxy, or download the "
            "files elsewhere and use --from DIR"
        )
    if last.short:
        return TruncatedDownloadError(
            f"{url}: the body ended early on every try ({last}); {dest.name}.part is kept and the next run "
            "resumes from it"
        )
    return PullError(f"{url}: download failed after {tries} tries ({last})")


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
