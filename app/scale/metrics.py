"""``/metrics`` under Ray: the sum of every replica's lnserve metrics, so one scrape sees the service.

Each replica keeps its own Prometheus registry (``app.http.metrics.Metrics``); ``ClusterMetrics.render``
asks all replicas of the deployment for their samples (Serve's ``broadcast``) and adds them up, as
prometheus_client's multiprocess mode does: counters, histograms and gauges sum (queue depth over replicas
is the service's queue depth), a start time takes the earliest, a maximum the largest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from ..http.metrics import Metrics

log = logging.getLogger("lnserve.scale.metrics")
BROADCAST_TIMEOUT_S = 10.0


def local_families(metrics: Metrics) -> list[Metric]:
    """This replica's samples, as picklable metric families."""
    return list(metrics.registry.collect())


def _combine(sample_name: str, a: float, b: float) -> float:
    if sample_name.endswith(("_start_time_seconds", "_created")):
        return min(a, b)
    if sample_name.endswith("_max_fds"):
        return max(a, b)
    return a + b


def merge_families(replicas: Iterable[list[Metric]]) -> list[Metric]:
    """One family per name, each sample (name, labels) combined over the replicas, in first-seen order."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for families in replicas:
        for fam in families:
            if fam.name not in merged:
                merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                values[fam.name] = {}
            acc = values[fam.name]
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                acc[key] = _combine(s.name, acc[key], s.value) if key in acc else s.value
    for name, fam in merged.items():
        for (sample_name, labels), value in values[name].items():
            fam.add_sample(sample_name, dict(labels), value)
    return list(merged.values())


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class ClusterMetrics:
    """What ``/metrics`` answers in a replica (``create_app``'s ``render_metrics``): every replica's samples,
    ``local`` (the metrics this replica counts into) standing in when the others cannot be reached.

    ``render`` blocks on the other replicas, so the route calls it in a worker thread.
    """

    def __init__(self, local: Metrics, handle: Callable[[], Any]) -> None:
        self.local, self._handle = local, handle

    def render(self) -> bytes:
        try:
            gathered = self._handle().broadcast("metrics_families").results(timeout_s=BROADCAST_TIMEOUT_S)
        except Exception as exc:  # a replica starting or dying: report this one rather than nothing
            log.warning("could not gather every replica's metrics (%s); serving this replica's", exc)
            gathered = [local_families(self.local)]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(merge_families(gathered)))
        return generate_latest(registry)
