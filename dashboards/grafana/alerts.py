"""The Prometheus alert rules (generate.py writes them to alerts.yml; prometheus.yml loads it).

- SLO burn rate, the multiwindow multi-burn-rate alerts of Google's SRE workbook: with an
  objective of SLO_OBJECTIVE, the error budget is 1 - SLO_OBJECTIVE of requests; page when
  both the long and the short window burn it 14.4 times too fast (2% of a 30-day budget in
  an hour), open a ticket at 6 times over 6 h. Each kind of slo_rules is judged alone (ttft,
  tpot for realtime; deadline for flex and batch), so the alert says which target is missed.
- Queue growth: the realtime queue (Postgres, queued) growing for 10 minutes; the batch
  class's for an hour (a batch upload is a step, not growth).
- No live worker, no dispatcher leader: from the leading dispatcher's gauges; no leader also
  when no dispatcher reports at all.
"""

from __future__ import annotations

from promql import SLO_OBJECTIVE, miss_ratio, on_leader

BUDGET = round(1 - SLO_OBJECTIVE, 6)
# Each kind alone; "both" is ttft and tpot together and would alert twice for one miss.
JUDGED = 'kind=~"ttft|tpot|deadline"'


def _burn(long: str, short: str, factor: float) -> str:
    limit = f"({factor} * {BUDGET})"
    by = "class, kind"
    return (f"({miss_ratio(JUDGED, long, by)}) > {limit}\n"
            f"and\n({miss_ratio(JUDGED, short, by)}) > {limit}")


def _queued(job_class: str) -> str:
    selector = 'fairway_queued_jobs{class="' + job_class + '"}'
    return f"sum by (class) {on_leader(selector)}"


def _growing(job_class: str, window: str) -> str:
    return (f"{_queued(job_class)} > 0\n"
            f"and\ndelta({_queued(job_class)}[{window}:1m]) > 0")


def _alert(name: str, expr: str, for_: str, severity: str, summary: str,
           description: str) -> dict:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


BURN_DESCRIPTION = ("{{ $labels.class }} requests miss their {{ $labels.kind }} target at "
                    "{{ $value | humanizePercentage }} (objective: "
                    + f"{SLO_OBJECTIVE:.0%}" + " met). See the Per-tenant SLOs dashboard.")

RULES = {"groups": [
    {"name": "fairway-slo", "rules": [
        _alert("FairwaySloFastBurn", _burn("1h", "5m", 14.4), "2m", "page",
               "SLO error budget burning 14.4x too fast ({{ $labels.class }}, "
               "{{ $labels.kind }})", BURN_DESCRIPTION),
        _alert("FairwaySloSlowBurn", _burn("6h", "30m", 6), "15m", "ticket",
               "SLO error budget burning 6x too fast ({{ $labels.class }}, "
               "{{ $labels.kind }})", BURN_DESCRIPTION),
    ]},
    {"name": "fairway-queues", "rules": [
        _alert("FairwayRealtimeQueueGrowing", _growing("realtime", "10m"), "10m", "page",
               "The realtime queue has grown for 10 minutes",
               "{{ $value }} realtime jobs queued, more than 10 minutes ago: the fleet "
               "does not keep up (workers, engine capacity, the dispatcher)."),
        _alert("FairwayBatchQueueGrowing", _growing("batch", "1h"), "1h", "ticket",
               "The batch-class queue has grown for over an hour",
               "{{ $value }} batch-class jobs queued, more than an hour ago: batch lines "
               "and flex requests arrive faster than idle capacity runs them."),
    ]},
    {"name": "fairway-fleet", "rules": [
        _alert("FairwayNoLiveWorker",
               f"max({on_leader('fairway_scheduler_workers')}) < 1", "2m", "page",
               "No worker has a live heartbeat",
               "The leading dispatcher sees no live worker: nothing runs."),
        _alert("FairwayNoDispatcherLeader",
               "sum(fairway_scheduler_leader) < 1 or absent(fairway_scheduler_leader)",
               "1m", "page", "No dispatcher leads",
               "No dispatcher holds the leader lock (or none reports): nothing is placed."),
    ]},
]}
