"""``lnserve serve --ray``: start (or join) Ray, deploy the shards and the encoding replicas, serve until
SIGTERM / SIGINT, then take the applications down.

Without an address a local Ray instance is started inside this process (internal services on 127.0.0.1,
a small object store, no dashboard) and ends with it. With ``--address`` this process joins an existing
cluster (``ray start --head`` on one machine, ``ray start --address=HEAD:6379`` on the others) and deletes
its applications on exit, leaving the cluster running.

Errors (``app.scale.errors``; the whole tree: docs/errors.md): ``ClusterUnreachableError`` (CLI, exit 2,
nothing deployed) when ``--address`` names no cluster this process can join.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lnserve.errors import UserInputError

from ..galleries.layout import default_root
from ..settings import Settings
from .deployment import INGRESS_APP, INGRESS_DEPLOYMENT, LnserveReplica, Topology
from .errors import ClusterLostError, ClusterUnreachableError
from .ingress import INGRESS_MODES
from .proxy import CALLBACK as PROXY_CALLBACK
from .shards import GALLERIES_APP, GalleryShard, shard_name
from .watch import WATCH_PERIOD_S, ClusterWatch, exit_now, within

log = logging.getLogger("lnserve.scale")

LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024  # vectors and small requests only: the models load in replicas
HEALTH_CHECK_PERIOD_S = 5.0
QUIET = {"enable_access_log": False}  # lnserve writes its own JSON access log, one line per request


@dataclass(frozen=True)
class RayOptions:
    """The ``--ray`` flags."""

    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    shards: int = 1
    address: str | None = None
    replica_cpus: float = 1.0
    shard_cpus: float = 1.0
    ingress: str = "proxy"

    def check(self) -> None:
        """Raises UserInputError for flags that contradict each other."""
        autoscale = self.min_replicas is not None or self.max_replicas is not None
        if self.ingress not in INGRESS_MODES:
            raise UserInputError(f"--ingress must be one of {', '.join(INGRESS_MODES)}, not {self.ingress!r}")
        if autoscale and self.ingress == "direct":
            raise UserInputError(
                "autoscaling needs --ingress proxy: Serve scales on the requests it routes, and with "
                "--ingress direct the replicas take their connections themselves (use --replicas N)"
            )
        if autoscale and self.replicas is not None:
            raise UserInputError(
                "--replicas is a fixed count: use it or --min-replicas/--max-replicas, not both"
            )
        if autoscale and (self.min_replicas is None or self.max_replicas is None):
            raise UserInputError("autoscaling needs both --min-replicas and --max-replicas")
        if autoscale and not 0 < self.min_replicas <= self.max_replicas:  # type: ignore[operator]
            raise UserInputError("--min-replicas must be at least 1 and at most --max-replicas")
        if self.replicas is not None and self.replicas < 1:
            raise UserInputError("--replicas must be at least 1")
        if self.shards < 1:
            raise UserInputError("--shards must be at least 1")
        if self.replica_cpus < 0 or self.shard_cpus < 0:
            raise UserInputError("CPUs per replica and per shard cannot be negative")

    def topology(self, gpus_per_replica: float) -> Topology:
        if self.min_replicas is None:
            return Topology(
                self.shards, replicas=self.replicas or 1, gpus_per_replica=gpus_per_replica,
                ingress=self.ingress,
            )  # fmt: skip
        return Topology(
            self.shards, min_replicas=self.min_replicas, max_replicas=self.max_replicas,
            gpus_per_replica=gpus_per_replica, ingress=self.ingress,
        )  # fmt: skip


def wants_gpu(settings: Settings, cluster_gpus: float) -> bool:
    """One GPU per replica when the ONNX provider is (or will default to) CUDA, none otherwise."""
    if settings.backend != "onnx":
        return False
    if settings.providers:
        return settings.providers[0] in ("CUDAExecutionProvider", "TensorrtExecutionProvider")
    return cluster_gpus > 0  # the default providers put CUDA first wherever a GPU is seen


def replica_options(settings: Settings, topology: Topology, cpus: float) -> dict[str, Any]:
    """Serve options of the encoding deployment.

    ``max_ongoing_requests`` is twice the micro-batch size: one batch running and the next one forming
    (with fewer, the batcher of a replica never fills). Autoscaling targets one batch's worth of requests
    in flight per replica.
    """
    options: dict[str, Any] = {
        "name": INGRESS_DEPLOYMENT,
        "max_ongoing_requests": 2 * settings.max_batch_size,
        "ray_actor_options": {"num_cpus": cpus, "num_gpus": topology.gpus_per_replica},
        "health_check_period_s": HEALTH_CHECK_PERIOD_S,
        "graceful_shutdown_timeout_s": settings.drain_timeout_s,
        "logging_config": QUIET,
    }
    if topology.replicas is not None:
        options["num_replicas"] = topology.replicas
    else:
        options["autoscaling_config"] = {
            "min_replicas": topology.min_replicas,
            "max_replicas": topology.max_replicas,
            "target_ongoing_requests": settings.max_batch_size,
        }
    return options


def build_galleries_app(root: Path, shards: int, cpus: float, scorer: str) -> Any:
    """Shards 1..S-1, then shard 0 with handles to them (it coordinates the writes)."""
    from ray import serve

    deployment: Any = serve.deployment(GalleryShard)  # a Deployment (the stubs see the decorator form)
    common = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": cpus}, "logging_config": QUIET}
    others = [
        deployment.options(name=shard_name(i), **common).bind(i, shards, str(root), scorer)
        for i in range(1, shards)
    ]
    return deployment.options(name=shard_name(0), **common).bind(0, shards, str(root), scorer, *others)


def build_ingress_app(settings: Settings, topology: Topology, cpus: float) -> Any:
    from ray import serve

    deployment: Any = serve.deployment(serve.ingress()(LnserveReplica))
    return deployment.options(**replica_options(settings, topology, cpus)).bind(settings, topology)


def _start_ray(opts: RayOptions) -> None:
    import ray

    if opts.address:
        try:
            ray.init(address=opts.address, namespace="lnserve", log_to_driver=True)
        except Exception as exc:  # Ray's own message runs to many lines; the likely causes are ours to say
            lines = str(exc).strip().splitlines()
            raise ClusterUnreachableError(
                f"cannot join the Ray cluster at {opts.address} ({type(exc).__name__}: "
                f"{lines[0] if lines else 'no detail'}); is it running, and does this process have the "
                "cluster's token (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN, or ~/.ray/auth_token; see "
                "docs/scaling-out.md)?"
            ) from None
        return
    n_replicas = opts.replicas or opts.max_replicas or 1
    needed = n_replicas * opts.replica_cpus + opts.shards * opts.shard_cpus
    ray.init(
        address="local",
        namespace="lnserve",
        num_cpus=max(int(needed + 0.999), os.cpu_count() or 1),  # logical slots: every replica fits
        object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=True,
    )


def forwarded_allow_ips(settings: Settings) -> str:
    """``FORWARDED_ALLOW_IPS`` for Serve's HTTP proxy (a uvicorn that believes ``X-Forwarded-For`` from these
    peers; unset, 127.0.0.1: any local client could pass as any address): ``trusted_proxies``, "" for none
    (``lnserve.app.http.client_identity``). A local instance's processes inherit it; on a cluster, export it
    before ``ray start``."""
    return ",".join(settings.trusted_proxies)


def serve_on_ray(settings: Settings, opts: RayOptions) -> None:
    """Deploy and serve until SIGTERM or SIGINT."""
    opts.check()
    # read when ray is imported: every replica's log lines, at once, not "[repeated 2x across cluster]"
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not opts.address:
        # a local instance advertises 127.0.0.1, not the host's address (read when ray is imported)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # the proxy answers a dead replica's requests with lnserve's 503, not a bare 500 (scale.proxy)
        os.environ.setdefault("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", PROXY_CALLBACK)
        os.environ["FORWARDED_ALLOW_IPS"] = forwarded_allow_ips(settings)
    import ray
    from ray import serve

    direct = opts.ingress == "direct"
    if direct and settings.port == 0:
        raise UserInputError("--ingress direct needs a fixed --port: every replica listens on the same one")
    if not opts.address:  # the local proxy (or replicas) bind here: a taken port is a one-line error first
        from ..http.server import bind_socket

        bind_socket(settings.host, settings.port).close()  # not shareable: fails if anything listens there
    _start_ray(opts)
    stop = threading.Event()
    serving = threading.Event()

    def on_signal(*_: Any) -> None:
        stop.set()
        if not serving.is_set():  # still deploying: stop that too (the take-down below is bounded)
            raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):  # after ray.init, which installs handlers of its own
        signal.signal(sig, on_signal)
    _watch_cluster(ClusterWatch(ray.get_runtime_context().gcs_address), stop)
    deployed = False
    try:
        gpus = 1.0 if wants_gpu(settings, ray.cluster_resources().get("GPU", 0.0)) else 0.0
        topology = opts.topology(gpus)
        root = Path(settings.galleries_dir).expanduser() if settings.galleries_dir else default_root()
        serve.start(
            proxy_location="Disabled" if direct else None,  # direct: the replicas are the HTTP servers
            http_options={"host": settings.host, "port": settings.port},
            logging_config=QUIET,
        )
        if not direct:
            _check_proxy_address(settings)
        deployed = True
        serve.run(
            build_galleries_app(root, opts.shards, opts.shard_cpus, settings.scorer),
            name=GALLERIES_APP,
            route_prefix=None,
        )
        if not settings.models:
            _install_demo_gallery(opts.shards, settings.precision)
        serve.run(
            build_ingress_app(settings, topology, opts.replica_cpus), name=INGRESS_APP, route_prefix="/"
        )
        log.info(
            "serving on ray at http://%s:%d (%s, %d shards, %s)", settings.host, settings.port,
            f"{topology.replicas} replicas" if topology.replicas else
            f"{topology.min_replicas}-{topology.max_replicas} replicas", opts.shards,
            "direct ingress: every node's replicas listen on this port" if direct else "Serve's proxy",
        )  # fmt: skip
        serving.set()
        stop.wait()
        log.info("shutting down")
    finally:
        budget = max(settings.drain_timeout_s, 1.0)
        if not within(budget, lambda: _take_down(joined=bool(opts.address), deployed=deployed), "take-down"):
            logging.shutdown()
            # Ray's exit handlers would wait on the same calls; its local processes die with this one
            os._exit(1 if sys.exc_info()[0] not in (None, SystemExit) else 0)


def _watch_cluster(watch: ClusterWatch, stop: threading.Event) -> None:
    """Until ``stop``, a lost cluster ends this process with one line and exit 1 (whatever it is doing)."""

    def run() -> None:
        while not stop.wait(WATCH_PERIOD_S):
            why = watch.lost()
            if why is not None:
                exit_now(ClusterLostError(f"lost the Ray cluster: {why}; the service is down"))

    threading.Thread(target=run, name="cluster-watch", daemon=True).start()


def _check_proxy_address(settings: Settings) -> None:
    """Serve runs one HTTP proxy address per cluster, set by whoever started Serve there first; a later
    ``serve.start`` with another address is ignored (a warning), so this refuses rather than report an
    address where nothing listens."""
    from ray.serve.context import _get_global_client

    from ..http.errors import AddressInUseError

    client = _get_global_client()
    assert client is not None  # serve.start just ran
    http = client.http_config
    if (http.host, http.port) != (settings.host, settings.port):
        raise AddressInUseError(
            f"cannot serve on {settings.host}:{settings.port}: Ray Serve on this cluster already listens on "
            f"{http.host}:{http.port} (one HTTP address per cluster); use --port {http.port}"
            + (f" --host {http.host}" if http.host != settings.host else "")
            + ", or run `serve shutdown` on the cluster first"
        )


def _install_demo_gallery(shards: int, precision: str) -> None:
    """Once, from here, before the replicas start (each would otherwise race to build it)."""
    from ..galleries.demo import install_demo_gallery
    from ..galleries.errors import GalleryCorruptError
    from .galleries import ShardedGalleries

    try:
        info = install_demo_gallery(ShardedGalleries.connect(shards), precision=precision)
        log.info("demo gallery %s ready (%d images)", info.name, info.count)
    except GalleryCorruptError as exc:  # quarantined (listed with its reason), as in one process
        log.error("demo gallery not installed: %s", exc)
    except Exception:  # a convenience, as in one process: never fail serving over it
        log.exception("could not install the demo gallery")


def _take_down(*, joined: bool, deployed: bool) -> None:
    """This server's applications deleted (a joined cluster keeps running), or the local instance ended."""
    import ray
    from ray import serve

    try:
        if joined and deployed:
            for app in (INGRESS_APP, GALLERIES_APP):
                serve.delete(app)
        elif not joined:
            serve.shutdown()
    finally:
        ray.shutdown()
    log.info("shut down")
