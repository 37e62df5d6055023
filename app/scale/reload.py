"""``POST /models/NAME/reload`` under Ray: every replica swaps to the new version, or none does.

The replica that takes the request coordinates a two-phase reload over all replicas of the deployment
(Serve's ``broadcast``): each one *stages* the new version (loads and warms it beside the serving one,
``ModelRegistry.stage``); only when every replica staged it does each *commit* (``ModelRegistry.swap``);
otherwise every replica *aborts* (drops what it staged) and keeps the old version, and the answer is
``422 reload_failed`` naming the replicas that failed and why. Gallery shards hold no model (queries reach
them as vectors with the model's identity), so the replicas are all there is to reload.

Before staging, the coordinator waits until the broadcast reaches itself and the deployment's replica
count: a replica may answer requests before Serve lists it as running (with ``--ingress direct`` it serves
its port from its own start-up), and a reload whose broadcast missed the coordinator would answer with the
old version; one that missed another replica would leave that one on it. A replica that starts later (a
replacement, an autoscaled one) loads the model's directory, which is the version the last successful
reload staged. What one replica staged and never heard back about (its coordinator died) is dropped after
``STAGED_TTL_S``.

The name is resolved once, by the coordinator (``ModelRegistry.resolve``): an alias is broadcast as the
model it names. Each replica keeps the registry's rule of two versions at most: its stage waits for an old
version still retiring there, and one that finds another coordinator's version staged refuses (409
``reload_in_progress``, and this reload is aborted everywhere) rather than loading a third.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from lnserve.errors import LnserveError

from ..serving.errors import ReloadBusyError, ReloadFailedError
from ..serving.registry import ModelEntry, ModelRegistry

log = logging.getLogger("lnserve.scale.reload")

BROADCAST_TIMEOUT_S = 600.0  # staging loads and warms a model on every replica
STAGED_TTL_S = BROADCAST_TIMEOUT_S + 60.0
MEMBERSHIP_WAIT_S = 60.0  # Serve's controller lists a started replica as running within seconds
MEMBERSHIP_POLL_S = 0.2
Broadcast = Callable[..., Awaitable[list[Any]]]  # (method, *args) -> one result or exception per replica


class StagedVersions:
    """One replica's side: versions staged by token, waiting for their commit or abort."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self._staged: dict[str, tuple[str, ModelEntry]] = {}
        self._expiry: set[asyncio.Task[None]] = set()

    async def stage(self, token: str, name: str) -> tuple[str, Any]:
        """("ok", sha256) once the new version is warm here, or ("error", the LnserveError)."""
        try:
            entry = await self.registry.stage(name)
        except LnserveError as exc:
            return "error", exc
        self._staged[token] = (name, entry)
        task = asyncio.get_running_loop().create_task(self._expire(token))
        self._expiry.add(task)
        task.add_done_callback(self._expiry.discard)
        return "ok", entry.ref.manifest_sha256 if entry.ref else None

    async def commit(self, token: str) -> str | None:
        """Serve the staged version; None when this replica staged nothing (it started after the stage and
        loaded the directory, which holds that version)."""
        staged = self._staged.pop(token, None)
        if staged is None:
            return None
        name, entry = staged
        self.registry.swap(name, entry)
        return entry.ref.manifest_sha256 if entry.ref else None

    async def abort(self, token: str) -> None:
        staged = self._staged.pop(token, None)
        if staged is not None:
            await self.registry.discard(staged[1])

    async def _expire(self, token: str) -> None:
        await asyncio.sleep(STAGED_TTL_S)
        if token in self._staged:
            log.warning("a staged reload was neither committed nor aborted; dropping it")
            await self.abort(token)


class ClusterReload:
    """The coordinator's side, in whichever replica took the request."""

    def __init__(
        self, registry: ModelRegistry, broadcast: Broadcast, *, identity: Callable[[], str], expected: int = 1
    ) -> None:
        self.registry, self.broadcast = registry, broadcast
        self.identity, self.expected = identity, expected  # this replica's id; the replicas there should be
        self._lock = asyncio.Lock()  # one reload at a time through this replica

    async def __call__(self, name: str) -> ModelEntry:
        name = self.registry.resolve(name)  # ModelNotFoundError (404) before anything; an alias: its model
        token = uuid.uuid4().hex
        async with self._lock:
            await self._await_membership(name)
            staged = await self.broadcast("stage_reload", token, name)
            busy = next((r[1] for r in staged if _refused(r, ReloadBusyError)), None)
            failures = [f for f in map(_failure, staged) if f is not None]
            shas = {r[1] for r in staged if _failure(r) is None}
            if not failures and len(shas) > 1:
                failures = [f"replicas read different versions ({', '.join(sorted(s[:12] for s in shas))})"]
            if failures or not staged:
                await self._abort(token)
                why = "; ".join(dict.fromkeys(failures)) or "no replica answered"
                log.warning("reload of model %s aborted on every replica: %s", name, why)
                if busy is not None:  # another coordinator's reload is staged: 409, as without Ray
                    raise busy
                raise ReloadFailedError(
                    f"model {name!r} was not reloaded on any of {len(staged)} replicas, the old version "
                    f"serves on: {why}"
                )
            committed = await self.broadcast("commit_reload", token)
            lost = [r for r in committed if isinstance(r, BaseException)]
            if lost:  # staged everywhere, so a replica that failed now has died: its successor loads it
                log.warning("reload of model %s: %d replica(s) did not confirm the swap", name, len(lost))
            log.info("model %s reloaded on %d replicas", name, len(staged))
        return self.registry.entries[name]

    async def _await_membership(self, name: str) -> None:
        """Return once a broadcast reaches this replica and ``expected`` replicas in all.

        Raises:
            ReloadFailedError: after ``MEMBERSHIP_WAIT_S``, the broadcast still misses this replica.
        """
        me = self.identity()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MEMBERSHIP_WAIT_S
        while True:
            try:
                answers = await self.broadcast("replica_identity")
            except Exception as exc:  # no replica listed yet (Serve's DeploymentUnavailableError)
                log.info("reload of model %s: the replicas are not listed yet (%s)", name, exc)
                answers = []
            members = {a for a in answers if isinstance(a, str)}
            if me in members and len(members) >= self.expected:
                return
            if loop.time() >= deadline:
                if me in members:  # one is missing for good (died, scaled down): its successor loads it
                    log.warning("reload of %s reaches %d of %d replicas", name, len(members), self.expected)
                    return
                raise ReloadFailedError(
                    f"model {name!r} was not reloaded, the old version serves on: the replica that took the "
                    "request is not yet listed by the cluster (it is still starting); retry in a few seconds"
                )
            await asyncio.sleep(MEMBERSHIP_POLL_S)

    async def _abort(self, token: str) -> None:
        for result in await self.broadcast("abort_reload", token):
            if isinstance(result, BaseException):
                log.warning("a replica could not drop a staged version: %s", result)


def _refused(result: Any, error: type[LnserveError]) -> bool:
    """Whether one replica's stage answered ``error``."""
    return isinstance(result, tuple) and result[0] == "error" and isinstance(result[1], error)


def _failure(result: Any) -> str | None:
    """Why one replica did not stage, or None."""
    if isinstance(result, BaseException):
        return f"a replica did not answer ({type(result).__name__})"
    status, value = result
    if status == "ok":
        return None
    message = str(value)
    prefix = "was not reloaded, the old version serves on: "
    return message.split(prefix, 1)[1] if prefix in message else message
