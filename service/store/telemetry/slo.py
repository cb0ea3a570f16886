"""SLO attainment and goodput over sliding windows, computed when /metrics is scraped.

Each finished request is judged once, on each kind of slo_rules (ttft, tpot, both for
realtime; deadline for batch class). Per-second buckets keep memory bounded whatever the
request rate. Goodput counts the requests that met every target (kind both or deadline).
These gauges cover the requests this process judged; the fleet-wide figures come from the
``fairway_slo_requests_total`` counters in PromQL (see docs/observability.md), which add up
across processes where ratios do not.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.store.telemetry.slo_rules import COMBINED

WINDOWS_S = {"1m": 60, "5m": 300}
SLO_WINDOW_METRICS = ("fairway_slo_attainment_ratio", "fairway_goodput_requests_per_second")
SLO_WINDOW_LABELS = {SLO_WINDOW_METRICS[0]: ("class", "kind", "window"),
                     SLO_WINDOW_METRICS[1]: ("class", "window")}


class SloWindows(Collector):
    def __init__(self, horizon_s: int = max(WINDOWS_S.values()),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._horizon = horizon_s
        self._clock = clock
        self._lock = threading.Lock()
        # (class, kind) -> deque of [second, met, total]
        self._buckets: dict[tuple[str, str], deque[list[int]]] = defaultdict(deque)

    def record(self, job_class: str, verdict: dict[str, bool]) -> None:
        """One judged request: ``verdict`` is slo_rules.judge's {kind: met}."""
        second = int(self._clock())
        with self._lock:
            for kind, met in verdict.items():
                buckets = self._buckets[(job_class, kind)]
                if not buckets or buckets[-1][0] != second:
                    buckets.append([second, 0, 0])
                    while buckets and buckets[0][0] <= second - self._horizon:
                        buckets.popleft()
                buckets[-1][1] += int(met)
                buckets[-1][2] += 1

    def totals(self, job_class: str, window_s: int, kind: str | None = None
               ) -> tuple[int, int]:
        """(met, judged) in the window; ``kind`` defaults to the class's combined one."""
        since = int(self._clock()) - window_s
        key = (job_class, kind or COMBINED.get(job_class, "both"))
        with self._lock:
            rows = [b for b in self._buckets.get(key, ()) if b[0] > since]
        return sum(b[1] for b in rows), sum(b[2] for b in rows)

    def collect(self):  # type: ignore[no-untyped-def]
        ratio = GaugeMetricFamily(SLO_WINDOW_METRICS[0],
                                  "Share of requests judged here in the window that met the "
                                  "kind's SLO (slo_rules).",
                                  labels=list(SLO_WINDOW_LABELS[SLO_WINDOW_METRICS[0]]))
        goodput = GaugeMetricFamily(SLO_WINDOW_METRICS[1],
                                    "Requests per second judged here that met every SLO.",
                                    labels=list(SLO_WINDOW_LABELS[SLO_WINDOW_METRICS[1]]))
        with self._lock:
            keys = sorted(self._buckets)
        for job_class, kind in keys:
            for name, seconds in WINDOWS_S.items():
                met, total = self.totals(job_class, seconds, kind)
                if total:
                    ratio.add_metric([job_class, kind, name], met / total)
                if kind == COMBINED.get(job_class):
                    goodput.add_metric([job_class, name], met / seconds)
        yield ratio
        yield goodput

    def describe(self):  # type: ignore[no-untyped-def]
        return []
