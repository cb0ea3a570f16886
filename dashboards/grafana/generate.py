"""Writes the Grafana dashboards in dashboards/grafana/dashboards/ from the panel lists below.

Edit here, then run ``python dashboards/grafana/generate.py``; the JSON files are committed
so Grafana provisioning needs no build step. tests/unit/dashboards/test_grafana_dashboards.py
checks that every query names a metric Fairway exports.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "prometheus"}
W = "$__rate_interval"


def q(quantile: float, metric: str, by: str = "", where: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return (f"histogram_quantile({quantile}, sum by ({group}) "
            f"(rate({metric}_bucket{{{where}}}[{W}])))")


def ratio(num: str, den: str, by: str) -> str:
    return f"sum by ({by}) ({num}) / sum by ({by}) ({den})"


# (title, unit, [(legend, expr)], kind)
FLEET = [
    ("Requests/s by class", "reqps",
     [("{{class}}", f"sum by (class) (rate(vllm:e2e_request_latency_seconds_count[{W}]))")]),
    ("TTFT", "s", [(f"p{int(p * 100)}", q(p, "vllm:time_to_first_token_seconds"))
                   for p in (0.5, 0.95, 0.99)]),
    ("E2E latency p95 by class", "s",
     [("{{class}}", q(0.95, "vllm:e2e_request_latency_seconds", "class"))]),
    ("TPOT p95 by class", "s",
     [("{{class}}", q(0.95, "vllm:time_per_output_token_seconds", "class"))]),
    ("Inter-token latency p95 by model", "s",
     [("{{model_name}}", q(0.95, "vllm:inter_token_latency_seconds", "model_name"))]),
    ("Queue time p95 by class", "s",
     [("{{class}}", q(0.95, "vllm:request_queue_time_seconds", "class"))]),
    ("Engine requests running / waiting", "short",
     [("running {{model_name}}", "sum by (model_name) (vllm:num_requests_running)"),
      ("waiting {{model_name}}", "sum by (model_name) (vllm:num_requests_waiting)")]),
    ("KV-cache usage by worker", "percentunit",
     [("{{instance}}", "max by (instance) (vllm:kv_cache_usage_perc)")]),
    ("Preemptions/s", "short",
     [("{{model_name}}", f"sum by (model_name) (rate(vllm:num_preemptions_total[{W}]))")]),
    ("Prefix-cache hit rate", "percentunit",
     [("{{model_name}}", ratio(f"rate(vllm:prefix_cache_hits_total[{W}])",
                               f"rate(vllm:prefix_cache_queries_total[{W}])", "model_name"))]),
    ("API requests in flight", "short",
     [("{{class}}", "sum by (class) (fairway_api_requests_in_flight)")]),
    ("HTTP responses/s by status", "reqps",
     [("{{status}}", f"sum by (status) (rate(fairway_http_requests_total[{W}]))")]),
]

TENANTS = [
    ("SLO attainment by tenant (5m)", "percentunit",
     [("{{tenant}}", ratio('rate(fairway_slo_requests_total{outcome="met",tenant=~"$tenant"}[5m])',
                           'rate(fairway_slo_requests_total{tenant=~"$tenant"}[5m])', "tenant"))]),
    ("Goodput (requests/s meeting every SLO) by class", "reqps",
     [("{{class}}", f'sum by (class) (rate(fairway_slo_requests_total{{outcome="met"}}[{W}]))')]),
    ("SLO attainment, in-process windows (API)", "percentunit",
     [("{{class}} {{window}}", "avg by (class, window) (fairway_slo_attainment_ratio)")]),
    ("TTFT p95 by tenant", "s",
     [("{{tenant}}", q(0.95, "vllm:time_to_first_token_seconds", "tenant",
                       'tenant=~"$tenant"'))]),
    ("E2E p95 by tenant", "s",
     [("{{tenant}}", q(0.95, "vllm:e2e_request_latency_seconds", "tenant",
                       'tenant=~"$tenant"'))]),
    ("Queue time p95 by tenant", "s",
     [("{{tenant}}", q(0.95, "vllm:request_queue_time_seconds", "tenant",
                       'tenant=~"$tenant"'))]),
    ("Admission rejections/s by reason", "reqps",
     [("{{reason}}", "sum by (reason) (rate(fairway_admission_rejections_total"
                     f'{{tenant=~"$tenant|unknown"}}[{W}]))')]),
    ("Fair-share (weighted VTC) counter by tenant", "short",
     [("{{tenant}} level {{level}}", 'fairway_fair_share_counter{tenant=~"$tenant"}')]),
    ("Jobs finished/s by tenant and status", "reqps",
     [("{{tenant}} {{status}}", "sum by (tenant, status) (rate(fairway_jobs_finished_total"
                                f'{{tenant=~"$tenant"}}[{W}]))')]),
]

BATCH = [
    ("Batches by status", "short", [("{{status}}", "sum by (status) (fairway_batches)")]),
    ("In-progress batch lines by tenant and state", "short",
     [("{{tenant}} {{state}}", "sum by (tenant, state) (fairway_batch_requests)")]),
    ("Batch completion by tenant", "percentunit",
     [("{{tenant}}", ratio('fairway_batch_requests{state=~"completed|failed"}',
                           'fairway_batch_requests{state="total"}', "tenant"))]),
    ("Batch lines finished/s by status", "reqps",
     [("{{status}}", "sum by (status) (rate(fairway_jobs_finished_total"
                     f'{{tier="batch"}}[{W}]))')]),
    ("Batch-class jobs by status", "short",
     [("{{status}}", 'sum by (status) (fairway_jobs{class="batch"})')]),
    ("Batch line E2E p95", "s",
     [("p95", q(0.95, "vllm:e2e_request_latency_seconds", "", 'tier="batch"'))]),
    ("Batch jobs parked for realtime work/s", "short",
     [("{{model_name}}", "sum by (model_name) (rate(fairway_job_preemptions_total"
                         f'{{class="batch"}}[{W}]))')]),
    ("Batch SLO (finished before deadline) attainment", "percentunit",
     [("batch", ratio('rate(fairway_slo_requests_total{class="batch",outcome="met"}[5m])',
                      'rate(fairway_slo_requests_total{class="batch"}[5m])', "class"))]),
]

SCHEDULER = [
    ("Decision latency (policy.schedule pass)", "s",
     [(f"p{int(p * 100)}", q(p, "fairway_scheduler_decision_seconds")) for p in (0.5, 0.99)]),
    ("Decisions/s by type", "short",
     [("{{decision}}", f"sum by (decision) (rate(fairway_scheduler_decisions_total[{W}]))")]),
    ("Dispatch lag p95 (claim commit to worker start)", "s",
     [("{{class}}", q(0.95, "fairway_dispatch_lag_seconds", "class"))]),
    ("Queued in the policy", "short", [("queued", "max(fairway_scheduler_queued_jobs)")]),
    ("Placed on workers by class", "short",
     [("{{class}}", "max by (class) (fairway_scheduler_placed_jobs)")]),
    ("Live workers / active dispatchers", "short",
     [("workers", "max(fairway_scheduler_workers)"),
      ("leaders", "sum(fairway_scheduler_leader)")]),
    ("Jobs by status (Postgres)", "short",
     [("{{status}} {{class}}", "max by (status, class) (fairway_jobs)")]),
    ("Fair-share counters by level", "short",
     [("{{tenant}} L{{level}}", "fairway_fair_share_counter")]),
    ("SLO-unattainable rejections/s", "short",
     [("rejected", "sum(rate(fairway_admission_rejections_total"
                   f'{{reason="slo_unattainable"}}[{W}]))')]),
    ("Dispatcher process CPU", "percentunit",
     [("{{instance}}", f'rate(process_cpu_seconds_total{{job="fairway-scheduler"}}[{W}])')]),
]

TENANT_VAR = {"name": "tenant", "type": "query", "datasource": DS, "includeAll": True,
              "multi": True, "allValue": ".*", "refresh": 2,
              "query": {"query": "label_values(fairway_slo_requests_total, tenant)",
                        "refId": "tenant"},
              "definition": "label_values(fairway_slo_requests_total, tenant)",
              "current": {"text": "All", "value": "$__all"}}


def panel(i: int, title: str, unit: str, targets: list[tuple[str, str]]) -> dict:
    return {
        "id": i + 1, "type": "timeseries", "title": title, "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [{"refId": chr(65 + n), "datasource": DS, "expr": expr,
                     "legendFormat": legend} for n, (legend, expr) in enumerate(targets)],
    }


def dashboard(uid: str, title: str, panels: list, tenant_var: bool = False) -> dict:
    return {
        "uid": uid, "title": title, "tags": ["fairway"], "timezone": "utc",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [TENANT_VAR] if tenant_var else []},
        "panels": [panel(i, *p) for i, p in enumerate(panels)],
    }


DASHBOARDS = {
    "fleet-overview.json": dashboard("fairway-fleet", "Fairway / Fleet overview", FLEET),
    "tenant-slos.json": dashboard("fairway-tenants", "Fairway / Per-tenant SLOs", TENANTS,
                                  tenant_var=True),
    "batch-progress.json": dashboard("fairway-batch", "Fairway / Batch progress", BATCH),
    "scheduler.json": dashboard("fairway-scheduler", "Fairway / Scheduler internals", SCHEDULER),
}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, body in DASHBOARDS.items():
        (OUT / name).write_text(json.dumps(body, indent=2) + "\n")
        print(OUT.name + "/" + name)


if __name__ == "__main__":
    main()
