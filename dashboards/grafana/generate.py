"""Writes the Grafana dashboards in dashboards/grafana/dashboards/ from the panel lists below,
and the Prometheus alert rules (alerts.py) to dashboards/grafana/alerts.yml.

Edit here, then run ``python dashboards/grafana/generate.py``; the files are committed so
Grafana and Prometheus need no build step. tests/unit/dashboards/ checks that the files are
fresh, that every query names a metric (and labels) Fairway exports, and runs promtool on
the rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from alerts import RULES
from promql import SLO_OBJECTIVE, W, attainment, on_leader, q, ratio, target

HERE = Path(__file__).resolve().parent
OUT = HERE / "dashboards"
ALERTS = HERE / "alerts.yml"
DS = {"type": "prometheus", "uid": "prometheus"}
RT = 'class="realtime"'


@dataclass
class P:
    """One panel: (legend, PromQL) targets; ``objective`` draws SLO_OBJECTIVE as a line;
    targets whose legend starts with "target" (the plans' SLO targets) are drawn dashed."""

    title: str
    unit: str
    targets: list[tuple[str, str]]
    kind: str = "timeseries"
    w: int = 12
    h: int = 8
    objective: bool = False
    thresholds: list[tuple[str, float | None]] = field(default_factory=list)


def stat(title: str, unit: str, expr: str, thresholds: list[tuple[str, float | None]]) -> P:
    return P(title, unit, [("", expr)], kind="stat", w=4, h=4, thresholds=thresholds)


ATTAINMENT_COLORS: list[tuple[str, float | None]] = [("red", None), ("green", SLO_OBJECTIVE)]

HEADLINE = [
    stat("Requests/s (judged)", "reqps",
         'sum(rate(fairway_slo_requests_total{kind=~"both|deadline"}[5m]))', []),
    stat("TTFT attainment (realtime, range)", "percentunit",
         attainment("ttft", "$__range", where=RT), ATTAINMENT_COLORS),
    stat("TPOT attainment (realtime, range)", "percentunit",
         attainment("tpot", "$__range", where=RT), ATTAINMENT_COLORS),
    stat("Both met: TTFT and TPOT attainment (range)", "percentunit",
         attainment("both", "$__range", where=RT), ATTAINMENT_COLORS),
    stat("Live workers", "short", f"max({on_leader('fairway_scheduler_workers')})",
         [("red", None), ("green", 1)]),
    stat("Dispatcher leaders", "short", "sum(fairway_scheduler_leader)",
         [("red", None), ("green", 1), ("red", 2)]),
]

FLEET = [
    *HEADLINE,
    P("Requests/s by class", "reqps",
      [("{{class}}", f"sum by (class) (rate(vllm:e2e_request_latency_seconds_count[{W}]))")]),
    P("TTFT (realtime) and the plans' TTFT targets", "s",
      [*((f"p{int(p * 100)}", q(p, "vllm:time_to_first_token_seconds", "", RT))
         for p in (0.5, 0.95, 0.99)),
       ("target {{tenant_tier}}", target("ttft"))]),
    P("E2E latency p95 by class", "s",
      [("{{class}}", q(0.95, "vllm:e2e_request_latency_seconds", "class"))]),
    P("TPOT p95 (realtime) and the plans' TPOT targets", "s",
      [("p95", q(0.95, "vllm:time_per_output_token_seconds", "", RT)),
       ("target {{tenant_tier}}", target("tpot"))]),
    P("SLO attainment (realtime, 5m): TTFT, TPOT, both", "percentunit",
      [(kind, attainment(kind, "5m", where=RT)) for kind in ("ttft", "tpot", "both")],
      objective=True),
    P("Queued jobs by tier", "short",
      [("{{tier}}", f"sum by (tier) {on_leader('fairway_queued_jobs')}")]),
    P("Inter-token latency p95 by model", "s",
      [("{{model_name}}", q(0.95, "vllm:inter_token_latency_seconds", "model_name"))]),
    P("Queue time p95 by class", "s",
      [("{{class}}", q(0.95, "vllm:request_queue_time_seconds", "class"))]),
    P("Engine requests running / waiting", "short",
      [("running {{model_name}}", "sum by (model_name) (vllm:num_requests_running)"),
       ("waiting {{model_name}}", "sum by (model_name) (vllm:num_requests_waiting)")]),
    P("KV-cache usage by worker", "percentunit",
      [("{{instance}}", "max by (instance) (vllm:kv_cache_usage_perc)")]),
    P("Preemptions/s", "short",
      [("{{model_name}}", f"sum by (model_name) (rate(vllm:num_preemptions_total[{W}]))")]),
    P("Prefix-cache hit rate", "percentunit",
      [("{{model_name}}", ratio(f"rate(vllm:prefix_cache_hits_total[{W}])",
                                f"rate(vllm:prefix_cache_queries_total[{W}])", "model_name"))]),
    P("API requests in flight", "short",
      [("{{class}}", "sum by (class) (fairway_api_requests_in_flight)")]),
    P("HTTP responses/s by status", "reqps",
      [("{{status}}", f"sum by (status) (rate(fairway_http_requests_total[{W}]))")]),
]

TENANT = 'tenant=~"$tenant"'
TENANTS = [
    P("TTFT attainment by tenant (realtime, 5m)", "percentunit",
      [("{{tenant}}", attainment("ttft", "5m", "tenant", f"{RT},{TENANT}"))], objective=True),
    P("TPOT attainment by tenant (realtime, 5m)", "percentunit",
      [("{{tenant}}", attainment("tpot", "5m", "tenant", f"{RT},{TENANT}"))], objective=True),
    P("Both met (TTFT and TPOT) attainment by tenant (realtime, 5m)", "percentunit",
      [("{{tenant}}", attainment("both", "5m", "tenant", f"{RT},{TENANT}"))], objective=True),
    P("Deadline attainment by tenant (flex and batch, 5m)", "percentunit",
      [("{{tenant}}", attainment("deadline", "5m", "tenant", TENANT))], objective=True),
    P("Goodput (requests/s meeting every SLO) by class", "reqps",
      [("{{class}}", "sum by (class) (rate(fairway_slo_requests_total"
                     f'{{kind=~"both|deadline",outcome="met"}}[{W}]))')]),
    P("SLO attainment, in-process windows (API)", "percentunit",
      [("{{class}} {{kind}} {{window}}",
        "avg by (class, kind, window) (fairway_slo_attainment_ratio)")], objective=True),
    P("TTFT p95 by tenant (realtime) and the plans' targets", "s",
      [("{{tenant}}", q(0.95, "vllm:time_to_first_token_seconds", "tenant", f"{RT},{TENANT}")),
       ("target {{tenant_tier}}", target("ttft"))]),
    P("TPOT p95 by tenant (realtime) and the plans' targets", "s",
      [("{{tenant}}", q(0.95, "vllm:time_per_output_token_seconds", "tenant",
                        f"{RT},{TENANT}")),
       ("target {{tenant_tier}}", target("tpot"))]),
    P("E2E p95 by tenant", "s",
      [("{{tenant}}", q(0.95, "vllm:e2e_request_latency_seconds", "tenant", TENANT))]),
    P("Queue time p95 by tenant", "s",
      [("{{tenant}}", q(0.95, "vllm:request_queue_time_seconds", "tenant", TENANT))]),
    P("Queued jobs by tenant", "short",
      [("{{tenant}}", "sum by (tenant) " + on_leader(f"fairway_queued_jobs{{{TENANT}}}"))]),
    P("Queued jobs by tenant and tier", "short",
      [("{{tenant}} {{tier}}",
        "sum by (tenant, tier) " + on_leader(f"fairway_queued_jobs{{{TENANT}}}"))]),
    P("Admission rejections/s by reason", "reqps",
      [("{{reason}}", "sum by (reason) (rate(fairway_admission_rejections_total"
                      f'{{tenant=~"$tenant|unknown"}}[{W}]))')]),
    P("Fair-share (weighted VTC) counter by tenant", "short",
      [("{{tenant}} level {{level}}", f"fairway_fair_share_counter{{{TENANT}}}")]),
    P("Fairness: Jain's index of service / fair share, by class (5 min)", "short",
      [("{{class}}", "max by (class) " + on_leader("fairway_fairness_jain_index"))]),
    P("Service / weighted fair share by tenant (5 min; below 1: under-served)", "short",
      [("{{tenant}} {{class}}", "max by (tenant, class) "
                                + on_leader(f"fairway_tenant_fair_share_ratio{{{TENANT}}}"))]),
    P("Queue wait p99 by tenant (jobs ended in 5 min)", "s",
      [("{{tenant}} {{class}}", "max by (tenant, class) " + on_leader(
          f'fairway_tenant_queue_wait_seconds{{{TENANT},quantile="0.99"}}'))]),
    P("Jobs finished/s by tenant and status", "reqps",
      [("{{tenant}} {{status}}", "sum by (tenant, status) (rate(fairway_jobs_finished_total"
                                 f"{{{TENANT}}}[{W}]))")]),
]

BATCH = [
    P("Batches by status", "short", [("{{status}}", "sum by (status) (fairway_batches)")]),
    P("In-progress batch lines by tenant and state", "short",
      [("{{tenant}} {{state}}", "sum by (tenant, state) (fairway_batch_requests)")]),
    P("Batch completion by tenant", "percentunit",
      [("{{tenant}}", ratio('fairway_batch_requests{state=~"completed|failed"}',
                            'fairway_batch_requests{state="total"}', "tenant"))]),
    P("Batch lines finished/s by status", "reqps",
      [("{{status}}", "sum by (status) (rate(fairway_jobs_finished_total"
                      f'{{tier="batch"}}[{W}]))')]),
    P("Batch-class jobs by status", "short",
      [("{{status}}", 'sum by (status) (fairway_jobs{class="batch"})')]),
    P("Queued batch-file lines and flex requests by tenant", "short",
      [("{{tenant}} {{tier}}",
        "sum by (tenant, tier) " + on_leader('fairway_queued_jobs{class="batch"}'))]),
    P("Batch line E2E p95", "s",
      [("p95", q(0.95, "vllm:e2e_request_latency_seconds", "", 'tier="batch"'))]),
    P("Batch jobs parked for realtime work/s", "short",
      [("{{model_name}}", "sum by (model_name) (rate(fairway_job_preemptions_total"
                          f'{{class="batch"}}[{W}]))')]),
    P("Batch-class SLO (finished before the deadline) attainment", "percentunit",
      [("{{tier}}", attainment("deadline", "5m", "tier", 'class="batch"'))], objective=True),
]

SCHEDULER = [
    P("Decision latency (policy.schedule pass)", "s",
      [(f"p{int(p * 100)}", q(p, "fairway_scheduler_decision_seconds")) for p in (0.5, 0.99)]),
    P("Decisions/s by type", "short",
      [("{{decision}}", f"sum by (decision) (rate(fairway_scheduler_decisions_total[{W}]))")]),
    P("Dispatch lag p95 (claim commit to worker start)", "s",
      [("{{class}}", q(0.95, "fairway_dispatch_lag_seconds", "class"))]),
    P("Queued in the policy", "short", [("queued", "max(fairway_scheduler_queued_jobs)")]),
    P("Desired workers by model and reason (autoscaling), and live workers", "short",
      [("{{model_name}} {{reason}}",
        "max by (model_name, reason) " + on_leader("fairway_desired_workers")),
       ("live workers", f"max({on_leader('fairway_scheduler_workers')})")]),
    P("Queued jobs (Postgres) by class and tier", "short",
      [("{{class}} {{tier}}", f"sum by (class, tier) {on_leader('fairway_queued_jobs')}")]),
    P("Placed on workers by class", "short",
      [("{{class}}", "max by (class) (fairway_scheduler_placed_jobs)")]),
    P("Live workers / active dispatchers", "short",
      [("workers", f"max({on_leader('fairway_scheduler_workers')})"),
       ("leaders", "sum(fairway_scheduler_leader)")]),
    P("Jobs by status (Postgres)", "short",
      [("{{status}} {{class}}", f"max by (status, class) {on_leader('fairway_jobs')}")]),
    P("Fair-share counters by level", "short",
      [("{{tenant}} L{{level}}", "fairway_fair_share_counter")]),
    P("SLO-unattainable rejections/s", "short",
      [("rejected", "sum(rate(fairway_admission_rejections_total"
                    f'{{reason="slo_unattainable"}}[{W}]))')]),
    P("Dispatcher process CPU", "percentunit",
      [("{{instance}}", f'rate(process_cpu_seconds_total{{job="fairway-scheduler"}}[{W}])')]),
]

TENANT_VAR = {"name": "tenant", "type": "query", "datasource": DS, "includeAll": True,
              "multi": True, "allValue": ".*", "refresh": 2,
              "query": {"query": "label_values(fairway_slo_requests_total, tenant)",
                        "refId": "tenant"},
              "definition": "label_values(fairway_slo_requests_total, tenant)",
              "current": {"text": "All", "value": "$__all"}}


def _thresholds(steps: list[tuple[str, float | None]]) -> dict:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def panel(i: int, p: P, pos: tuple[int, int]) -> dict:
    defaults: dict = {"unit": p.unit}
    overrides: list[dict] = []
    options: dict = {"legend": {"displayMode": "list", "placement": "bottom"}}
    if p.kind == "stat":
        defaults["thresholds"] = _thresholds(p.thresholds or [("blue", None)])
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "colorMode": "background", "graphMode": "area", "textMode": "value"}
    elif p.objective:
        # The objective as a dashed red line across the panel (the step's colour).
        defaults["thresholds"] = _thresholds([("transparent", None), ("red", SLO_OBJECTIVE)])
        defaults["custom"] = {"thresholdsStyle": {"mode": "dashed"}}
        defaults["min"], defaults["max"] = 0, 1
    if any(legend.startswith("target") for legend, _ in p.targets):
        overrides.append({
            "matcher": {"id": "byRegexp", "options": "^target .*"},
            "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash",
                                                                "dash": [10, 10]}},
                           {"id": "custom.lineWidth", "value": 2}]})
    return {
        "id": i + 1, "type": p.kind, "title": p.title, "datasource": DS,
        "gridPos": {"h": p.h, "w": p.w, "x": pos[0], "y": pos[1]},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "targets": [{"refId": chr(65 + n), "datasource": DS, "expr": expr,
                     "legendFormat": legend} for n, (legend, expr) in enumerate(p.targets)],
    }


def layout(panels: list[P]) -> list[dict]:
    """Left to right, wrapping at Grafana's 24 columns."""
    out, x, y, row_h = [], 0, 0, 0
    for i, p in enumerate(panels):
        if x + p.w > 24:
            x, y, row_h = 0, y + row_h, 0
        out.append(panel(i, p, (x, y)))
        x, row_h = x + p.w, max(row_h, p.h)
    return out


def dashboard(uid: str, title: str, panels: list[P], tenant_var: bool = False) -> dict:
    return {
        "uid": uid, "title": title, "tags": ["fairway"], "timezone": "utc",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [TENANT_VAR] if tenant_var else []},
        "panels": layout(panels),
    }


DASHBOARDS = {
    "fleet-overview.json": dashboard("fairway-fleet", "Fairway / Fleet overview", FLEET),
    "tenant-slos.json": dashboard("fairway-tenants", "Fairway / Per-tenant SLOs", TENANTS,
                                  tenant_var=True),
    "batch-progress.json": dashboard("fairway-batch", "Fairway / Batch progress", BATCH),
    "scheduler.json": dashboard("fairway-scheduler", "Fairway / Scheduler internals", SCHEDULER),
}


class _RulesDumper(yaml.SafeDumper):
    """Multi-line PromQL as YAML block text, as a person would write it."""


_RulesDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def rendered() -> dict[Path, str]:
    """Every generated file and its text."""
    files = {OUT / name: json.dumps(body, indent=2) + "\n" for name, body in DASHBOARDS.items()}
    files[ALERTS] = ("# Generated by dashboards/grafana/generate.py from alerts.py: edit there.\n"
                     + yaml.dump(RULES, Dumper=_RulesDumper, sort_keys=False, width=100))
    return files


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for path, body in rendered().items():
        path.write_text(body)
        print(path.relative_to(HERE))


if __name__ == "__main__":
    main()
