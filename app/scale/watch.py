"""The driver's side of a cluster's life: is the cluster still there, and leaving in bounded time.

Once the cluster's GCS is gone (its head stopped or lost), every Ray call of the driver blocks and retries
for minutes, and so does ``ray.shutdown`` at exit (the driver once ignored SIGTERM for minutes, logging
"Failed to push error to driver"). So the driver polls the GCS's port with a plain TCP connect, which
never blocks on Ray, and leaves at once, with one line, when it stays unreachable; and on SIGTERM it takes
its applications down in a thread it waits for no longer than the drain timeout.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections.abc import Callable

from lnserve.errors import LnserveError

log = logging.getLogger("lnserve.scale")

WATCH_PERIOD_S = 1.0
CONNECT_TIMEOUT_S = 2.0
LOST_AFTER = 5  # failed checks in a row (a restarting GCS or a busy host is not a lost cluster)


class ClusterWatch:
    """Counts failed connects to the GCS's address; ``lost`` says why once it has failed ``LOST_AFTER``
    times in a row."""

    def __init__(self, gcs_address: str) -> None:
        host, _, port = gcs_address.rpartition(":")
        self.address = gcs_address
        self._target = (host.strip("[]"), int(port))
        self._failures = 0

    def lost(self) -> str | None:
        try:
            with socket.create_connection(self._target, timeout=CONNECT_TIMEOUT_S):
                self._failures = 0
                return None
        except OSError as exc:
            self._failures += 1
            if self._failures < LOST_AFTER:
                return None
            return f"its GCS at {self.address} stopped answering ({exc.strerror or type(exc).__name__})"


def exit_now(error: LnserveError) -> None:
    """The CLI's one line and exit code, without Python's exit handlers: Ray's would block on a cluster
    that is gone."""
    logging.shutdown()
    sys.stderr.write(f"lnserve: error [{error.code}]: {error}\n")
    sys.stderr.flush()
    os._exit(error.exit_code)


def within(seconds: float, work: Callable[[], None], what: str) -> bool:
    """Run ``work`` in a daemon thread and wait for it at most ``seconds``; False when it did not finish."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except Exception:
            log.exception("%s failed", what)
        finally:
            done.set()

    threading.Thread(target=run, name=what, daemon=True).start()
    if done.wait(seconds):
        return True
    log.warning("%s did not finish within %.1f s; leaving without it", what, seconds)
    return False
