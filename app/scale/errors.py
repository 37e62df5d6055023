"""The errors of ``serve --ray`` (codes only; ``app.http.errors`` maps them to HTTP statuses, the CLI exits
with ``exit_code``). No Ray import: the rest of the app names them without the extra. The whole tree:
docs/errors.md."""

from __future__ import annotations

from lnserve.errors import LnserveError, UserInputError


class ShardUnavailableError(LnserveError):
    """A gallery shard did not answer (restarting, its node lost): retry after ``Retry-After``."""

    code = "shard_unavailable"


class ClusterUnreachableError(UserInputError):
    """``--address`` names no cluster this process can join (not running there, or not its token)."""

    code = "cluster_unreachable"


class ClusterLostError(LnserveError):
    """The Ray cluster (its GCS) stopped answering while ``serve --ray`` ran: the service is down."""

    code = "cluster_lost"
