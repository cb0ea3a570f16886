"""The JSON log formatter and its redaction guard, bounded labels, SLO windows, buckets."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from service.observability.requests import RequestObserver, observe_request
from service.store.telemetry import metrics as m
from service.store.telemetry.labels import OTHER, TenantLabels, tier_label
from service.store.telemetry.logfmt import JsonFormatter, TextFormatter, bind_job, unbind_job
from service.store.telemetry.slo import SloWindows
from service.store.telemetry.slo_rules import SloTargets


def _record(msg: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("fairway.test", logging.INFO, __file__, 1, msg, args, None)
    if exc:
        try:
            raise ValueError("bad key fw-" + "A" * 40)
        except ValueError:
            import sys

            record.exc_info = sys.exc_info()
    record.__dict__.update(extra)
    return record


def test_json_lines_drop_sensitive_fields_and_mask_keys():
    key = "fw-" + "x" * 43
    line = JsonFormatter().format(_record(
        "auth failed for %s with Bearer abcdefghijklmnop", key, exc=True,
        job_id="j1", attempt=2, prompt="hunter2", messages=[{"content": "hunter2"}],
        api_key=key, output="secret answer", tenant_id="t1", job_class="batch"))
    data = json.loads(line)
    assert data["msg"] == "auth failed for [redacted] with Bearer [redacted]"
    assert data["job_id"] == "j1" and data["attempt"] == 2
    assert data["tenant"] == "t1" and data["class"] == "batch"
    for leaked in ("hunter2", "secret answer", key, "A" * 40, "abcdefghijklmnop"):
        assert leaked not in line
    assert "ValueError" in data["exc"]


def test_job_context_rides_every_line_of_its_task_only():
    fmt = JsonFormatter()

    async def job(job_id: str) -> dict:
        bind_job(job_id=job_id, tenant="t", job_class="realtime", attempt=1)
        await asyncio.sleep(0)
        return json.loads(fmt.format(_record("working")))

    async def main() -> list[dict]:
        return list(await asyncio.gather(job("a"), job("b")))

    first, second = asyncio.run(main())
    assert (first["job_id"], second["job_id"]) == ("a", "b")
    assert {"tenant", "class", "attempt"} <= set(first)
    assert "job_id" not in json.loads(fmt.format(_record("outside")))
    token = bind_job(job_id="c")
    assert "job_id=c" in TextFormatter().format(_record("text"))
    unbind_job(token)


def test_tenant_labels_are_capped():
    labels = TenantLabels(max_tenants=2)
    assert [labels(t) for t in ("a", "b", "c", "a")] == ["a", "b", OTHER, "a"]
    assert tier_label(None, "batch") == "batch" and tier_label("flex") == "flex"


def test_tenant_labels_are_names_for_the_top_n_and_other_for_the_rest():
    names = {"id-a": "acme", "id-b": "globex", "id-c": "initech", "id-o": "other"}
    looked_up: list[str] = []

    def lookup(tenant_id: str) -> str | None:
        looked_up.append(tenant_id)
        return names.get(tenant_id)

    labels = TenantLabels(max_tenants=2, lookup=lookup)
    assert [labels(t) for t in ("id-a", "id-b", "id-c", "id-a")] == [
        "acme", "globex", OTHER, "acme"]
    assert looked_up == ["id-a", "id-b"]  # once per tenant; a full table looks up no more
    assert labels("nope") == OTHER and labels(None) == "unknown"
    # The rank (most requests first) decides who is named; the rest become "other".
    labels.rank([("id-c", "initech"), ("id-o", "other"), ("id-a", "acme")])
    assert [labels(t) for t in ("id-c", "id-o", "id-a")] == [
        "initech", "other (tenant)", OTHER]


def test_tenant_labels_survive_a_database_outage():
    def down(tenant_id: str) -> str | None:
        raise OSError("connection refused")

    labels = TenantLabels(max_tenants=5, lookup=down)
    assert labels("id-a") == OTHER
    labels.lookup = {"id-a": "acme"}.get
    assert labels("id-a") == OTHER  # not retried at once: no connect storm while it is down


def test_batch_file_lines_are_labelled_tier_batch():
    # A batch-file line is stored with the service_tier its output echoes ("default") but
    # runs in the batch class; the dashboards filter tier="batch" for batch lines.
    assert tier_label("default", "batch") == "batch"
    assert tier_label("flex", "batch") == "flex"
    assert tier_label("default", "realtime") == "default"
    assert tier_label("priority", "realtime") == "priority"


def test_slo_windows():
    now = [1000.0]
    windows = SloWindows(clock=lambda: now[0])
    for met in (True, True, False):
        windows.record("realtime", {"ttft": True, "tpot": met, "both": met})
    now[0] += 120  # the first three fall out of the 1m window, stay in the 5m one
    windows.record("realtime", {"ttft": False, "tpot": True, "both": False})
    windows.record("batch", {"deadline": True})
    assert windows.totals("realtime", 60) == (0, 1)
    assert windows.totals("realtime", 300) == (2, 4)
    assert windows.totals("realtime", 300, "ttft") == (3, 4)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in windows.collect() for s in family.samples}

    def ratio(kind: str, job_class: str = "realtime") -> float:
        return samples[("fairway_slo_attainment_ratio",
                        (("class", job_class), ("kind", kind), ("window", "5m")))]

    assert (ratio("ttft"), ratio("tpot"), ratio("both")) == (0.75, 0.75, 0.5)
    assert ratio("deadline", "batch") == 1.0
    goodput = samples[("fairway_goodput_requests_per_second",
                       (("class", "realtime"), ("window", "5m")))]
    assert goodput == 2 / 300  # the requests that met every target: kind "both"


def _slo_counts(tenant: str) -> dict[tuple[str, str], float]:
    return {(kind, outcome): m.REGISTRY.get_sample_value("fairway_slo_requests_total", {
        "tenant": tenant, "class": "realtime", "tier": "default", "kind": kind,
        "outcome": outcome}) or 0.0
        for kind in ("ttft", "tpot", "both") for outcome in ("met", "missed")}


def test_the_api_judges_ttft_and_tpot_separately():
    # Met the TTFT target, missed the TPOT one: before, the metric counted this "met" (TTFT
    # only) while the admin view counted it missed (both); now each kind says so.
    obs = observe_request(model="m", tenant="t-slo-kinds", job_class="realtime",
                          tier="default", targets=SloTargets(ttft_s=60.0, tpot_s=1e-9),
                          deadline_s=600.0)
    assert isinstance(obs, RequestObserver)
    tenant = obs.labels[1]  # however this process labels it (name, id, or "other")
    before = _slo_counts(tenant)
    obs.first_token()
    time.sleep(0.01)
    obs.finished(ok=True, completion_tokens=5)
    after = _slo_counts(tenant)
    moved = {key for key in after if after[key] - before[key] == 1}
    assert moved == {("ttft", "met"), ("tpot", "missed"), ("both", "missed")}
    assert all(after[key] == before[key] for key in after.keys() - moved)



def test_buckets_cover_gpu_milliseconds_and_cpu_seconds():
    for buckets in (m.TTFT_BUCKETS, m.TOKEN_GAP_BUCKETS):
        assert buckets[0] <= 0.001 and buckets[-1] >= 80
        assert sum(1 for b in buckets if b < 0.1) >= 4  # resolution for an H200
        assert sum(1 for b in buckets if 1 <= b <= 10) >= 4  # and for a CPU engine
    assert m.E2E_BUCKETS[0] <= 0.01 and m.E2E_BUCKETS[-1] >= 3600


def test_vllm_names_are_exported():
    names = m.exported_metric_names()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
                 "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_bucket",
                 "vllm:request_queue_time_seconds_bucket",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        assert name in names
