"""The all-or-none reload of ``serve --ray`` (``scale.reload``) over two real registries standing in for two
replicas (each with its own copy of the model's directory, real onnxruntime sessions); the fan-out is a
plain gather where Ray would ``broadcast``. A reload that one replica cannot stage leaves both on the old
version and answers ``reload_failed`` naming why; when both stage it, both serve the new one."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lnserve.app.scale import reload as reload_module
from lnserve.app.scale.reload import ClusterReload, StagedVersions
from lnserve.app.serving.errors import ReloadBusyError, ReloadFailedError
from lnserve.app.serving.registry import ModelRegistry
from lnserve.app.settings import Settings
from lnserve.converters.order_embedding import read_order_embedding, write_order_embedding
from tests.conftest import LEGACY

NAME = "served"


def _convert(out: Path, *, tuned: bool) -> None:
    model = read_order_embedding(LEGACY / "order_embedding" / "oe_order_gru")
    if tuned:  # a fine-tuned release: other word embeddings, another sha256
        model.tensors = {k: v * 1.5 if "embedding" in k else v for k, v in model.tensors.items()}
    write_order_embedding(model, out, name=NAME)


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("versions")
    _convert(root / "v1", tuned=False)
    _convert(root / "v2", tuned=True)
    return {"v1": root / "v1", "v2": root / "v2"}


def _install(version: Path, model_dir: Path) -> None:
    shutil.rmtree(model_dir, ignore_errors=True)
    shutil.copytree(version, model_dir)


async def _replicas(
    tmp_path: Path, dirs: list[Path], aliases: dict[str, str] | None = None
) -> list[tuple[ModelRegistry, StagedVersions]]:
    out = []
    for d in dirs:
        settings = Settings(models=[d], galleries_dir=tmp_path / "g", threads=1, model_aliases=aliases or {})
        registry = ModelRegistry(settings)
        await registry.open()
        assert not await registry.load()
        out.append((registry, StagedVersions(registry)))
    return out


Replicas = list[tuple[ModelRegistry, StagedVersions]]


@asynccontextmanager
async def _two_replicas_on_v1(
    tmp_path: Path, versions: dict[str, Path], aliases: dict[str, str] | None = None
) -> AsyncIterator[tuple[Replicas, list[Path]]]:
    """Two replicas, each serving v1 from its own copy of the model's directory; closed on the way out."""
    dirs = [tmp_path / "a" / NAME, tmp_path / "b" / NAME]
    for d in dirs:
        _install(versions["v1"], d)
    replicas = await _replicas(tmp_path, dirs, aliases)
    try:
        yield replicas, dirs
    finally:
        for registry, _ in replicas:
            await registry.close()


def _fan_out(replicas: Replicas, listed: list[set[int]] | None = None) -> Any:
    """Ray's ``broadcast`` as a gather; replica i's identity is ``str(i)``. ``listed``: the replicas that the
    successive broadcasts reach (Serve's view while replicas start), the last one from then on."""
    calls = {"stage_reload": "stage", "commit_reload": "commit", "abort_reload": "abort"}
    views = list(listed or [set(range(len(replicas)))])

    async def broadcast(method: str, *args: Any) -> list[Any]:
        view = views.pop(0) if len(views) > 1 else views[0]
        reached = [(i, staged) for i, (_, staged) in enumerate(replicas) if i in view]
        if method == "replica_identity":
            return [str(i) for i, _ in reached]
        calls_made = (getattr(s, calls[method])(*args) for _, s in reached)
        return list(await asyncio.gather(*calls_made, return_exceptions=True))

    return broadcast


def _coordinator(replicas: Replicas, i: int, **fan_out: Any) -> ClusterReload:
    return ClusterReload(replicas[i][0], _fan_out(replicas, **fan_out), identity=lambda: str(i), expected=2)


def _sha(registry: ModelRegistry) -> str:
    return str(registry.entries[NAME].describe(default=True)["sha256"])


async def _vector(registry: ModelRegistry) -> np.ndarray:
    entry = registry.entries[NAME]  # not ``get``: this task (the whole test) would hold the version
    seqs = entry.token_ids(["a dog on a table"], pretokenized=False, eos=None, truncate=True)
    return await entry.encode_ids(seqs, normalize=None)


def test_a_reload_one_replica_cannot_stage_leaves_every_replica_on_the_old_version(
    tmp_path: Path, versions: dict[str, Path]
) -> None:
    async def main() -> None:
        async with _two_replicas_on_v1(tmp_path, versions) as (replicas, dirs):
            v1_sha, v1_vec = _sha(replicas[0][0]), await _vector(replicas[0][0])
            reload = _coordinator(replicas, 0)
            # replica a finds v2, replica b a damaged copy: a loads and warms v2, then drops it
            _install(versions["v2"], dirs[0])
            weights = next(p for p in dirs[1].iterdir() if p.suffix in (".safetensors", ".npz", ".onnx"))
            weights.write_bytes(weights.read_bytes()[:-7])
            with pytest.raises(ReloadFailedError, match="was not reloaded on any of 2 replicas") as err:
                await reload(NAME)
            assert "serves on" in str(err.value)
            for registry, staged in replicas:
                assert _sha(registry) == v1_sha
                np.testing.assert_array_equal(await _vector(registry), v1_vec)
                assert not staged._staged  # nothing left staged

            # both find v2: both serve it, with one sha256
            _install(versions["v2"], dirs[1])
            entry = await reload(NAME)
            shas = {_sha(r) for r, _ in replicas}
            assert shas == {entry.describe(default=True)["sha256"]} and v1_sha not in shas
            got = [await _vector(r) for r, _ in replicas]
            np.testing.assert_array_equal(got[0], got[1])
            assert np.abs(got[0] - v1_vec).max() > 1e-3

    asyncio.run(main())


def test_replicas_that_read_different_versions_do_not_swap(tmp_path: Path, versions: dict[str, Path]) -> None:
    """Each stages fine but not the same bytes (the directory changed between them): none swaps."""

    async def main() -> None:
        async with _two_replicas_on_v1(tmp_path, versions) as (replicas, dirs):
            v1_sha = _sha(replicas[0][0])
            _install(versions["v2"], dirs[0])
            with pytest.raises(ReloadFailedError, match="replicas read different versions"):
                await _coordinator(replicas, 1)(NAME)
            assert {_sha(r) for r, _ in replicas} == {v1_sha}

    asyncio.run(main())


def test_a_reload_waits_until_the_broadcast_reaches_the_coordinator_and_every_replica(
    tmp_path: Path, versions: dict[str, Path]
) -> None:
    """A replica that serves before Serve lists it (``--ingress direct`` while starting) takes a reload: a
    broadcast that missed it would answer with the old version, or leave a missed replica on it."""

    async def main() -> None:
        async with _two_replicas_on_v1(tmp_path, versions) as (replicas, dirs):
            v1_sha = _sha(replicas[0][0])
            for d in dirs:
                _install(versions["v2"], d)
            # Serve lists neither, then only the other one, then both
            entry = await _coordinator(replicas, 0, listed=[set(), {1}, {1}, {0, 1}])(NAME)
            v2_sha = entry.describe(default=True)["sha256"]
            assert v2_sha != v1_sha and {_sha(r) for r, _ in replicas} == {v2_sha}

    asyncio.run(main())


def test_a_coordinator_the_cluster_never_lists_reloads_nothing(
    tmp_path: Path, versions: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reload_module, "MEMBERSHIP_WAIT_S", 0.5)

    async def main() -> None:
        async with _two_replicas_on_v1(tmp_path, versions) as (replicas, dirs):
            v1_sha = _sha(replicas[0][0])
            for d in dirs:
                _install(versions["v2"], d)
            with pytest.raises(ReloadFailedError, match="not yet listed by the cluster"):
                await _coordinator(replicas, 0, listed=[{1}])(NAME)
            assert {_sha(r) for r, _ in replicas} == {v1_sha}
            assert not any(staged._staged for _, staged in replicas)

    asyncio.run(main())


def test_a_reload_by_alias_reloads_the_model_on_every_replica(
    tmp_path: Path, versions: dict[str, Path]
) -> None:
    """The coordinator resolves the alias once and broadcasts the model's own name: every replica swaps
    the model itself (it used to store the new version under the alias and retire the real model)."""

    async def main() -> None:
        async with _two_replicas_on_v1(tmp_path, versions, {"ada": NAME}) as (replicas, dirs):
            v1_sha = _sha(replicas[0][0])
            for d in dirs:
                _install(versions["v2"], d)
            entry = await _coordinator(replicas, 0)("ada")
            assert entry.name == NAME
            for registry, _ in replicas:
                assert list(registry.entries) == [NAME]
                assert _sha(registry) == entry.describe(default=True)["sha256"] != v1_sha
                while registry._retiring:  # the old version retires (nothing holds it) and is closed
                    await asyncio.sleep(0.01)
                await _vector(registry)  # the model serves on by its name

    asyncio.run(main())


def test_a_replica_with_another_reload_staged_refuses_a_third_version(
    tmp_path: Path, versions: dict[str, Path]
) -> None:
    """Two versions at most per replica: one staged by another coordinator (not yet committed) makes this
    reload answer ``reload_in_progress`` (409) and abort everywhere, instead of loading a third."""

    async def main() -> None:
        async with _two_replicas_on_v1(tmp_path, versions) as (replicas, dirs):
            v1_sha = _sha(replicas[0][0])
            for d in dirs:
                _install(versions["v2"], d)
            assert (await replicas[1][1].stage("other", NAME))[0] == "ok"
            with pytest.raises(ReloadBusyError, match="being reloaded already"):
                await _coordinator(replicas, 0)(NAME)
            assert {_sha(r) for r, _ in replicas} == {v1_sha}
            assert not replicas[0][1]._staged and list(replicas[1][1]._staged) == ["other"]
            await replicas[1][1].abort("other")
            entry = await _coordinator(replicas, 0)(NAME)
            assert {_sha(r) for r, _ in replicas} == {entry.describe(default=True)["sha256"]} != {v1_sha}

    asyncio.run(main())
