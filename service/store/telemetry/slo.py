"""SLO attainment and goodput over sliding windows, computed when /metrics is scraped.

Each finished request is judged once (met = succeeded within every target it carries: the
TTFT target for realtime, the deadline for flex and batch). Per-second buckets keep memory
bounded whatever the request rate. These gauges cover the requests this process judged; the
fleet-wide figures come from the ``fairway_slo_requests_total`` counters in PromQL (see
docs/observability.md), which add up across processes where ratios do not.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

WINDOWS_S = {"1m": 60, "5m": 300}
SLO_WINDOW_METRICS = ("fairway_slo_attainment_ratio", "fairway_goodput_requests_per_second")


class SloWindows(Collector):
    def __init__(self, horizon_s: int = max(WINDOWS_S.values()),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._horizon = horizon_s
        self._clock = clock
        self._lock = threading.Lock()
        # class -> deque of [second, met, total]
        self._buckets: dict[str, deque[list[int]]] = defaultdict(deque)

    def record(self, job_class: str, met: bool) -> None:
        second = int(self._clock())
        with self._lock:
            buckets = self._buckets[job_class]
            if not buckets or buckets[-1][0] != second:
                buckets.append([second, 0, 0])
                while buckets and buckets[0][0] <= second - self._horizon:
                    buckets.popleft()
            buckets[-1][1] += int(met)
            buckets[-1][2] += 1

    def totals(self, job_class: str, window_s: int) -> tuple[int, int]:
        since = int(self._clock()) - window_s
        with self._lock:
            rows = [b for b in self._buckets.get(job_class, ()) if b[0] > since]
        return sum(b[1] for b in rows), sum(b[2] for b in rows)

    def collect(self):  # type: ignore[no-untyped-def]
        ratio = GaugeMetricFamily(SLO_WINDOW_METRICS[0],
                                  "Share of requests judged here in the window that met their "
                                  "SLOs.", labels=["class", "window"])
        goodput = GaugeMetricFamily(SLO_WINDOW_METRICS[1],
                                    "Requests per second judged here that met every SLO.",
                                    labels=["class", "window"])
        for job_class in sorted(self._buckets):
            for name, seconds in WINDOWS_S.items():
                met, total = self.totals(job_class, seconds)
                if total:
                    ratio.add_metric([job_class, name], met / total)
                goodput.add_metric([job_class, name], met / seconds)
        yield ratio
        yield goodput

    def describe(self):  # type: ignore[no-untyped-def]
        return []
