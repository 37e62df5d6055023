"""Fetch one file over HTTP(S) with httpx: stream into ``NAME.part``, resume it with a Range request after a
cut connection, retry with exponential backoff and jitter, hash while streaming, then rename atomically.

A final ``NAME`` therefore only ever exists complete (and verified, when a sha256 is known). A ``NAME.part``
left behind by a cut connection is kept on purpose: the next run resumes from it.

A server can also hold a download open forever, sending a byte now and then (in the body or in its
headers): every try must receive ``STALL_BYTES`` within each ``Limits.stall`` seconds, and the whole pull
ends at ``Limits.deadline``. Both are checked as bytes arrive and, on the main thread, by a timer signal
(a server that drips its headers never hands a chunk back); what a stalled or late download received is
deleted, not kept for a resume.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from lnserve.errors import shown
from lnserve.hashing import sha256_file

from .errors import (
    ChecksumMismatchError,
    DeadlineExceededError,
    OfflineError,
    PullError,
    RemoteNotFoundError,
    StalledDownloadError,
    TruncatedDownloadError,
)

Progress = Callable[[int, int | None], None]  # (bytes so far, total bytes or None)

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
USER_AGENT = "lnserve-pull/1"
STALL_BYTES = 1024  # a try that receives less than this in Limits.stall seconds has stalled
CONNECT_TIMEOUT = 15.0


@dataclass(frozen=True)
class Limits:
    """How long a pull may take: ``stall`` seconds at most for each ``STALL_BYTES`` of a try, and
    ``deadline_s`` seconds for the whole pull, counted from ``started`` (``time.monotonic()``)."""

    stall: float = 30.0
    deadline_s: float = 6 * 3600.0
    started: float | None = None

    def deadline(self) -> float:
        return (time.monotonic() if self.started is None else self.started) + self.deadline_s

    def begin(self) -> Limits:
        """These limits with the clock started now (a pull's deadline covers every file and try)."""
        return self if self.started is not None else Limits(self.stall, self.deadline_s, time.monotonic())


class _Stalled(Exception):
    """A try received less than STALL_BYTES within the stall window."""


class _PastDeadline(Exception):
    """The pull's overall deadline passed."""


class _Watch:
    """The progress of one try: restarted by every STALL_BYTES received, checked against both limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.deadline = limits, limits.deadline()
        self.since, self.bytes = time.monotonic(), 0

    def got(self, n: int) -> None:
        self.bytes += n
        if self.bytes >= STALL_BYTES:
            self.since, self.bytes = time.monotonic(), 0
        self.check()

    def check(self) -> None:
        now = time.monotonic()
        if now >= self.deadline:
            raise _PastDeadline
        if now - self.since >= self.limits.stall:
            raise _Stalled

    def timeout(self) -> httpx.Timeout:
        """httpx's per-read limit: no byte at all for a stall window (or until the deadline) is a stall."""
        left = max(0.01, self.deadline - time.monotonic())
        return httpx.Timeout(min(self.limits.stall, left), connect=min(CONNECT_TIMEOUT, left))


@contextmanager
def _ticking(watch: _Watch) -> Iterator[None]:
    """Check ``watch`` on a timer signal while a try runs, so that a trickle inside httpx (headers sent a
    byte at a time) cannot outlast the limits. Signals reach the main thread only: elsewhere the checks on
    each chunk and httpx's read timeout remain."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def tick(signum: int, frame: object) -> None:
        watch.check()

    previous = signal.signal(signal.SIGALRM, tick)
    interval = max(0.05, min(1.0, watch.limits.stall / 4))
    signal.setitimer(signal.ITIMER_REAL, interval, interval)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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

    def __init__(self, reason: str, *, connected: bool, short: bool = False, stalled: bool = False) -> None:
        super().__init__(reason)
        self.connected, self.short, self.stalled = connected, short, stalled


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
    limits: Limits = Limits(),
    progress: Progress | None = None,
) -> Downloaded:
    """Download ``url`` to ``dest`` (reusing a complete ``dest`` from an earlier run).

    Raises:
        OfflineError: no try could connect to the host.
        RemoteNotFoundError: HTTP 404 / 410.
        TruncatedDownloadError: the body ended early on every try (``dest.part`` is kept for a resume).
        StalledDownloadError: every try stalled (see ``Limits``); nothing is kept.
        DeadlineExceededError: the pull's deadline passed; nothing of this file is kept.
        ChecksumMismatchError: the complete file has the wrong sha256 or size (nothing is kept).
        PullError: any other HTTP error, or repeated failures.
    """
    if dest.is_file():
        digest = sha256_file(dest)
        if sha256 is None or digest == sha256.lower():
            return Downloaded(dest, url, digest, dest.stat().st_size, sha256 is not None, resumed=False)
        dest.unlink()  # a stale or corrupt earlier download: fetch it again
    part = _Partial(dest.with_name(dest.name + ".part"))
    limits = limits.begin()
    failures: list[_Retry] = []
    try:
        for attempt in range(retry.attempts):
            if attempt:
                time.sleep(min(retry.wait(attempt - 1), max(0.0, limits.deadline() - time.monotonic())))
            try:
                _try_once(client, url, part, progress, _Watch(limits))
                break
            except _Retry as exc:
                failures.append(exc)
        else:
            if failures[-1].stalled:
                part.reset()
            raise _final_error(url, dest, failures)
    except _PastDeadline:
        got = part.size()
        part.reset()
        raise DeadlineExceededError(
            f"{url}: the pull ran past its deadline of {limits.deadline_s:g} s ({got} bytes of {dest.name} "
            "received, not kept); raise --deadline for a slow link, or use a mirror (--base-url)"
        ) from None
    return _finish(url, dest, part, sha256=sha256, size=size)


def _try_once(
    client: httpx.Client, url: str, part: _Partial, progress: Progress | None, watch: _Watch
) -> None:
    watch.check()
    offset = part.size()
    headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    total: int | None = None
    stalled = f"stalled: less than {STALL_BYTES} bytes in {watch.limits.stall:g} s (--stall-timeout)"
    try:
        with _ticking(watch), client.stream("GET", url, headers=headers, timeout=watch.timeout()) as resp:
            offset, total = _start(resp, url, part, offset)
            part.sync_digest()
            with part.path.open("ab") as f:
                for chunk in resp.iter_raw():  # no chunk_size: a sized chunker would drop bytes on a cut
                    f.write(chunk)
                    part.digest.update(chunk)
                    part.hashed += len(chunk)
                    if progress:
                        progress(part.hashed, total)
                    watch.got(len(chunk))
                f.flush()
                os.fsync(f.fileno())
    except _Stalled:
        raise _Retry(stalled, connected=True, stalled=True) from None
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _Retry(f"cannot connect ({_reason(exc)})", connected=False) from None
    except httpx.ReadTimeout:
        watch.check()  # the deadline, if that is what cut the read short
        raise _Retry(stalled, connected=True, stalled=True) from None
    except httpx.TooManyRedirects as exc:
        raise PullError(
            f"{url}: too many redirects ({_reason(exc)}): the server redirects in a loop or too far"
        ) from None
    except httpx.UnsupportedProtocol as exc:  # a redirect to ftp:// or file://: no retry will change it
        raise PullError(f"{url}: {_reason(exc)}: only http and https are fetched") from None
    except httpx.TransportError as exc:
        got = part.size()
        short = total is not None and got < total
        detail = f"received {got} of {total} bytes" if short else _reason(exc)
        raise _Retry(f"connection lost ({detail})", connected=True, short=short) from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:  # a malformed redirect, ...
        raise PullError(f"{url}: {type(exc).__name__}: {_reason(exc)}") from None
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
    raise PullError(f"{url}: HTTP {status} {shown(resp.reason_phrase)}".rstrip())


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
    if last.stalled:
        return StalledDownloadError(
            f"{url}: {last}, on every one of {tries} tries; nothing was kept (a slow link may need a larger "
            "--stall-timeout)"
        )
    if last.short:
        return TruncatedDownloadError(
            f"{url}: the body ended early on every try ({last}); {dest.name}.part is kept and the next run "
            "resumes from it"
        )
    return PullError(f"{url}: download failed after {tries} tries ({last})")


def _reason(exc: Exception) -> str:
    """What went wrong, on one terminal-safe line (httpx quotes the server's words in some messages)."""
    return shown(" ".join(str(exc).split())[:300]) or type(exc).__name__
