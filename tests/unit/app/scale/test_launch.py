"""The Serve options ``lnserve serve --ray`` deploys with: current API names that Ray accepts, batching room,
GPUs only for CUDA, and flag combinations refused before Ray starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lnserve.app.scale.launch import RayOptions, replica_options, wants_gpu
from lnserve.app.settings import Settings
from lnserve.errors import UserInputError

serve = pytest.importorskip("ray.serve", reason="needs the ray extra")


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(galleries_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_fixed_and_autoscaled_options_are_valid_serve_options(tmp_path: Path) -> None:
    from lnserve.app.scale.deployment import LnserveReplica

    settings = _settings(tmp_path, max_batch_size=48)
    deployment = serve.deployment(serve.ingress()(LnserveReplica))
    fixed = replica_options(settings, RayOptions(replicas=3).topology(0.0), 1.0)
    assert fixed["num_replicas"] == 3 and fixed["max_ongoing_requests"] >= settings.max_batch_size
    assert deployment.options(**fixed).num_replicas == 3  # Ray validates every name and value
    auto = replica_options(settings, RayOptions(min_replicas=1, max_replicas=4).topology(1.0), 2.0)
    assert "num_replicas" not in auto and "max_concurrent_queries" not in auto
    assert auto["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 48}
    assert auto["ray_actor_options"] == {"num_cpus": 2.0, "num_gpus": 1.0}
    scaled = deployment.options(**auto)
    assert scaled._deployment_config.autoscaling_config.max_replicas == 4


def test_one_gpu_per_replica_only_for_cuda(tmp_path: Path) -> None:
    assert not wants_gpu(_settings(tmp_path, providers=["CPUExecutionProvider"]), cluster_gpus=8)
    assert wants_gpu(_settings(tmp_path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]), 0)
    assert wants_gpu(_settings(tmp_path), cluster_gpus=2)  # default providers: CUDA wherever a GPU is seen
    assert not wants_gpu(_settings(tmp_path), cluster_gpus=0)
    assert not wants_gpu(_settings(tmp_path, backend="torch"), cluster_gpus=2)


@pytest.mark.parametrize(
    "opts",
    [
        RayOptions(replicas=2, min_replicas=1, max_replicas=2),
        RayOptions(min_replicas=2),
        RayOptions(min_replicas=3, max_replicas=2),
        RayOptions(replicas=0),
        RayOptions(shards=0),
        RayOptions(replica_cpus=-1),
    ],
)
def test_contradictory_flags_are_refused(opts: RayOptions) -> None:
    with pytest.raises(UserInputError):
        opts.check()
