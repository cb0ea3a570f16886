"""/metrics of the API, the dispatcher and the workers after real traffic on the sim stack:
the key series exist and moved, gauges return to zero, preemptions are counted; /readyz."""

from __future__ import annotations

import concurrent.futures as cf
import uuid

import openai
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.api.app import create_app
from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.models.tenants import Tenant
from service.store.settings import EngineSettings, Settings
from service.store.settings_groups import ApiSettings
from tests.integration._scrape import (
    api_url,
    has,
    scheduler_url,
    scrape,
    total,
    worker_url,
)
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


def _client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=120)


def _published(stack: Stack) -> bool:
    try:
        scheduler_url(stack)
        return True
    except AssertionError:
        return False


def _tenant_name(database_url: str, tenant_id: uuid.UUID) -> str:
    with sync_session(database_url) as session:
        return str(session.scalar(select(Tenant.name).where(Tenant.id == tenant_id)))


def test_every_process_exports_metrics_that_move(sim_stack: Stack, make_tenant, database_url):
    tenant_id, key = make_tenant("obs")
    tenant = _tenant_name(database_url, tenant_id)  # labels carry the tenant's name
    wait_until(lambda: _published(sim_stack), 20, "dispatcher metrics endpoint")
    urls = {"api": api_url(sim_stack), "scheduler": scheduler_url(sim_stack),
            "worker": worker_url(sim_stack, "sim-1")}
    before = {name: scrape(url) for name, url in urls.items()}

    api = _client(sim_stack, key)
    messages = [{"role": "user", "content": "count the metrics"}]
    for _ in range(2):
        api.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    for _ in range(2):
        stream = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True})
        assert any(chunk.usage for chunk in stream)
    served = 4

    # Gauges go back to zero once the work is done (worker gauges follow its heartbeat).
    def idle() -> bool:
        worker = scrape(urls["worker"])
        sched = scrape(urls["scheduler"])
        return (total(scrape(urls["api"]), "fairway_api_requests_in_flight") == 0
                and total(worker, "vllm:num_requests_running", model_name=MODEL) == 0
                and total(worker, "vllm:num_requests_waiting", model_name=MODEL) == 0
                and total(worker, "fairway_worker_active_jobs", model_name=MODEL) == 0
                and total(sched, "fairway_scheduler_queued_jobs") == 0
                and total(sched, "fairway_jobs", status="running") == 0)

    wait_until(idle, 20, "queue and engine gauges back to zero")
    after = {name: scrape(url) for name, url in urls.items()}
    a, s, w = after["api"], after["scheduler"], after["worker"]

    def moved(proc: str, name: str, **labels: str) -> float:
        return total(after[proc], name, **labels) - total(before[proc], name, **labels)

    # API: one TTFT/E2E/SLO observation per request it served, for this tenant.
    assert total(a, "vllm:time_to_first_token_seconds_count", tenant=tenant) == served
    assert total(a, "vllm:e2e_request_latency_seconds_count", tenant=tenant) == served
    assert total(a, "vllm:time_per_output_token_seconds_count", tenant=tenant) == served
    for kind in ("ttft", "tpot", "both"):  # each request judged once on each kind
        assert total(a, "fairway_slo_requests_total", tenant=tenant, kind=kind,
                     **{"class": "realtime"}) == served
    assert has(a, "fairway_slo_attainment_ratio", window="1m")
    assert moved("api", "fairway_http_requests_total", route="/v1/chat/completions",
                 status="200") >= served
    # Worker: queue time and outcome once per job; relayed requests' TTFT is the API's alone.
    assert total(w, "vllm:request_queue_time_seconds_count", tenant=tenant) == served
    assert total(w, "fairway_jobs_finished_total", tenant=tenant, status="succeeded") == served
    assert total(w, "vllm:time_to_first_token_seconds_count", tenant=tenant) == 0
    assert moved("worker", "vllm:inter_token_latency_seconds_count", model_name=MODEL) > 0
    assert moved("worker", "vllm:prefix_cache_queries_total", model_name=MODEL) > 0
    assert moved("worker", "fairway_dispatch_lag_seconds_count") >= served
    assert has(w, "vllm:kv_cache_usage_perc", model_name=MODEL)
    assert has(w, "vllm:num_preemptions_total", model_name=MODEL)  # present, even at 0
    # Dispatcher: passes timed, assignments counted, fair share per tenant, leadership.
    assert moved("scheduler", "fairway_scheduler_decision_seconds_count") > 0
    # Each job was assigned by a pass or, on the express path, booked once the API placed it.
    assert (moved("scheduler", "fairway_scheduler_decisions_total", decision="assign")
            + moved("scheduler", "fairway_scheduler_decisions_total", decision="express")
            ) >= served
    assert total(s, "fairway_scheduler_leader") == 1
    assert total(s, "fairway_scheduler_workers") >= 1
    # The plans' targets (the test tenant's plan among them), for panels and alerts.
    assert total(s, "fairway_slo_target_seconds", tenant_tier="standard", kind="ttft") == 1.0
    assert has(s, "fairway_slo_target_seconds", kind="tpot")
    wait_until(lambda: total(scrape(urls["scheduler"]), "fairway_fair_share_counter",
                             tenant=tenant, level="0") > 0, 10, "fair-share counter")
    # The autoscaler's count (every 5 s): the minute's realtime asks for the one worker.
    wait_until(lambda: total(scrape(urls["scheduler"]), "fairway_desired_workers",
                             model_name=MODEL) >= 1, 15, "desired workers")
    assert has(scrape(urls["scheduler"]), "fairway_autoscale_realtime_busy", model_name=MODEL)


PRE_MODEL = "sim-obs-preempt"
PRE_ENV = {"FAIRWAY_SERVED_MODEL_NAME": PRE_MODEL, "FAIRWAY_MAX_NUM_SEQS": "2",
           "FAIRWAY_SIM_SPEED": "0.25"}


def _running(database_url: str) -> list[Job]:
    with sync_session(database_url) as session:
        return list(session.scalars(select(Job).where(Job.model == PRE_MODEL,
                                                      Job.status == "running")))


def _preempted(database_url: str) -> bool:
    with sync_session(database_url) as session:
        return bool(session.scalar(select(Job.id).where(Job.model == PRE_MODEL,
                                                        Job.preemptions > 0).limit(1)))


def test_preemption_counters_rise(sim_stack: Stack, make_tenant, database_url):
    _, key = make_tenant("obs-pre")
    sim_stack.start_worker("obs-pre", **PRE_ENV)
    try:
        worker = worker_url(sim_stack, "obs-pre")
        sched = scheduler_url(sim_stack)
        preempts_before = total(scrape(sched), "fairway_scheduler_decisions_total",
                                decision="preempt")
        api = _client(sim_stack, key)
        wait_until(lambda: PRE_MODEL in {m.id for m in api.models.list().data}, 10,
                   "model listed")
        flex = {"model": PRE_MODEL, "max_tokens": 60, "temperature": 0, "service_tier": "flex",
                "extra_body": {"ignore_eos": True}}
        with cf.ThreadPoolExecutor(3) as pool:
            batch = [pool.submit(api.chat.completions.create,
                                 messages=[{"role": "user", "content": f"story {i}"}], **flex)
                     for i in range(2)]
            wait_until(lambda: len(_running(database_url)) == 2 and all(
                j.first_token_at for j in _running(database_url)), 30, "flex jobs running")
            urgent = [{"role": "user", "content": "urgent " + uuid.uuid4().hex}]
            realtime = pool.submit(api.chat.completions.create, model=PRE_MODEL, max_tokens=8,
                                   temperature=0, messages=urgent)
            wait_until(lambda: _preempted(database_url), 30, "a flex job parked")
            wait_until(lambda: total(scrape(worker), "vllm:num_preemptions_total",
                                     model_name=PRE_MODEL) >= 1, 10, "preemption counted")
            w = scrape(worker)
            assert total(w, "fairway_job_preemptions_total", model_name=PRE_MODEL,
                         **{"class": "batch"}) >= 1
            assert total(scrape(sched), "fairway_scheduler_decisions_total",
                         decision="preempt") > preempts_before
            for future in [*batch, realtime]:
                future.result(timeout=180)
    finally:
        sim_stack.kill("worker-obs-pre")


def test_readyz_reports_reasons(sim_stack: Stack, database_url, test_redis_url):
    import httpx

    ready = httpx.get(sim_stack.base_url + "/readyz", timeout=5)
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ready" and body["checks"]["database"] == "ok"
    assert body["checks"]["workers"]["sim-model"] >= 1
    assert httpx.get(sim_stack.base_url + "/healthz", timeout=5).status_code == 200

    # Without a waiting room, a model with no worker takes the API out of its balancer.
    lonely = Settings(database_url=database_url, redis_url=test_redis_url,
                      engine=EngineSettings(kind="sim", served_model_name="model-nobody-serves"),
                      api=ApiSettings(waiting_room_seconds=0))
    with TestClient(create_app(lonely)) as client:
        resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["reasons"] == ["no live worker serves model 'model-nobody-serves'"]
    # With one (the default), its requests wait for a worker there: the API stays ready.
    waiting = Settings(database_url=database_url, redis_url=test_redis_url,
                       engine=EngineSettings(kind="sim", served_model_name="model-nobody-serves"))
    with TestClient(create_app(waiting)) as client:
        resp = client.get("/readyz")
    assert resp.status_code == 200, resp.text
    assert resp.json()["checks"]["workers"]["model-nobody-serves"] == 0


def test_latencies_carry_the_job_id_as_an_exemplar(sim_stack: Stack, make_tenant):
    """Asked for OpenMetrics, the API's TTFT and end-to-end histograms carry the job's public
    id as an exemplar: a slow bucket in Grafana leads to the job the explorer shows."""
    import httpx

    _, key = make_tenant("exemplar")
    answer = _client(sim_stack, key).chat.completions.create(
        model=MODEL, max_tokens=4, temperature=0,
        messages=[{"role": "user", "content": "an exemplar, please"}])
    job_id = "job_" + answer.id.removeprefix("chatcmpl-")  # one id, two prefixes
    url = api_url(sim_stack)

    def exposition() -> str:
        return httpx.get(url, timeout=10,
                         headers={"Accept": "application/openmetrics-text"}).text

    wait_until(lambda: f'job_id="{job_id}"' in exposition(), 10, "the job's exemplar")
    text = exposition()
    lines = [line for line in text.splitlines() if f'job_id="{job_id}"' in line]
    assert {line.split("{")[0] for line in lines} >= {
        "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket"}
    assert text.rstrip().endswith("# EOF")  # the OpenMetrics format, only when asked for
    assert "# EOF" not in httpx.get(url, timeout=10).text
