"""Every metric Fairway exports, in one registry shared by the API, the dispatcher and workers.

Each process updates the subset it can see (the ``where`` column of docs/observability.md) and
serves the whole registry; series it never touches are simply absent from its /metrics.

Names follow vLLM's where the meaning is the same (``vllm:*``), so existing vLLM dashboards
and alerts keep working; everything else is ``fairway_*``. Labels are bounded: ``tenant`` is
capped (service.store.telemetry.labels), ``class`` is realtime|batch, ``tier`` is the echoed
service_tier (priority|default|flex) or ``batch`` for batch-file lines, ``tenant_tier`` a
tenant's plan (free, standard, ...: its SLO targets; the label keeps its first name).

Fairway uses its own ``CollectorRegistry``, not prometheus_client's global one: the real
vLLM engine registers its own ``vllm:*`` collectors in the global registry, and serving
both would duplicate names. The worker exports engine numbers from its heartbeat instead.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)

# One bucket layout has to fit a CPU engine (TTFT of seconds) and an H200 (milliseconds):
# vLLM's own layouts, with millisecond buckets added below them.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5,
                0.75, 1.0, 1.5, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
               20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                     0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# Actual / predicted TTFT: 1 is a perfect prediction, above 1 an under-estimate.
PREDICTION_RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0,
                            10.0, 20.0)
DECISION_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                    0.05, 0.1, 0.25, 0.5, 1.0)

REQUEST_LABELS = ("model_name", "tenant", "class", "tier")


def _h(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Histogram:
    return Histogram(name, doc, labels, buckets=buckets, registry=REGISTRY)


def _c(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    return Counter(name, doc, labels, registry=REGISTRY)


def _g(name: str, doc: str, labels: tuple[str, ...] = (),
       merge: Literal["all", "livesum", "livemin"] = "all") -> Gauge:
    # ``merge``: how an API of several worker processes adds this gauge up across them
    # (multiproc.py; prometheus_client's multiprocess_mode). "all" keeps one series per pid,
    # for gauges only the dispatcher or a worker sets, which never run in that mode.
    return Gauge(name, doc, labels, registry=REGISTRY, multiprocess_mode=merge)


# -- request latency (API for HTTP requests; worker for batch-file lines: once per job) -------
TTFT = _h("vllm:time_to_first_token_seconds",
          "Time from request arrival to its first token.", REQUEST_LABELS, TTFT_BUCKETS)
E2E = _h("vllm:e2e_request_latency_seconds",
         "Time from request arrival to its last token (successful requests).",
         REQUEST_LABELS, E2E_BUCKETS)
TPOT = _h("vllm:time_per_output_token_seconds",
          "(E2E - TTFT) / (output tokens - 1), per request.", REQUEST_LABELS, TOKEN_GAP_BUCKETS)
QUEUE_TIME = _h("vllm:request_queue_time_seconds",
                "Time a job waited from creation to its first start on a worker.",
                REQUEST_LABELS, TTFT_BUCKETS)
ITL = _h("vllm:inter_token_latency_seconds",
         "Gap between successive outputs of one request on the engine.",
         ("model_name", "class"), TOKEN_GAP_BUCKETS)

# -- engine (worker, from each heartbeat's engine stats) ----------------------------------------
RUNNING = _g("vllm:num_requests_running", "Requests running in the engine.", ("model_name",))
WAITING = _g("vllm:num_requests_waiting", "Requests waiting in the engine.", ("model_name",))
KV_USAGE = _g("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1.", ("model_name",))
PREEMPTIONS = _c("vllm:num_preemptions",
                 "Requests preempted (engine recompute preemptions and jobs parked for "
                 "realtime work).", ("model_name",))
PREFIX_QUERIES = _c("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                    ("model_name",))
PREFIX_HITS = _c("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.",
                 ("model_name",))
WORKER_ACTIVE_JOBS = _g("fairway_worker_active_jobs", "Jobs this worker is running.",
                        ("model_name",))
JOBS_FINISHED = _c("fairway_jobs_finished", "Jobs that reached a final status on a worker.",
                   ("model_name", "tenant", "class", "tier", "status"))
JOB_PREEMPTIONS = _c("fairway_job_preemptions",
                     "Jobs a worker parked with a checkpoint because the dispatcher took them "
                     "back.", ("model_name", "class"))
DISPATCH_LAG = _h("fairway_dispatch_lag_seconds",
                  "From the dispatcher's claim commit to the worker starting the job.",
                  ("class",), TTFT_BUCKETS)

# -- API ------------------------------------------------------------------------------------
HTTP_REQUESTS = _c("fairway_http_requests", "HTTP requests by route template and status.",
                   ("method", "route", "status"))
IN_FLIGHT = _g("fairway_api_requests_in_flight",
               "Completion requests the API is relaying now.", ("class",), merge="livesum")
TTFT_PREDICTION = _h("fairway_ttft_prediction_ratio",
                     "A realtime request's TTFT at the API over the door's prediction when it "
                     "admitted it (above 1: the door under-estimated).", ("model_name", "tier"),
                     PREDICTION_RATIO_BUCKETS)
REJECTIONS = _c("fairway_admission_rejections",
                "Requests refused at admission (quota reason, or slo_unattainable from the "
                "dispatcher).", ("tenant", "reason"))
SLO_REQUESTS = _c("fairway_slo_requests",
                  "Finished requests by SLO outcome, per kind judged (slo_rules: ttft, tpot "
                  "and both for realtime, deadline for batch class); sum one kind at a time.",
                  ("tenant", "class", "tier", "kind", "outcome"))

# -- dispatcher ---------------------------------------------------------------------------------
DECISION_SECONDS = _h("fairway_scheduler_decision_seconds",
                      "Time of one policy.schedule() pass.", (), DECISION_BUCKETS)
DECISIONS = _c("fairway_scheduler_decisions", "Decisions carried out.", ("decision",))
SCHED_QUEUED = _g("fairway_scheduler_queued_jobs", "Jobs queued in the policy.")
SCHED_PLACED = _g("fairway_scheduler_placed_jobs",
                  "Jobs sent to workers and not yet seen finish.", ("class",))
SCHED_WORKERS = _g("fairway_scheduler_workers", "Workers with a live heartbeat.")
SCHED_LEADER = _g("fairway_scheduler_leader", "1 on the active dispatcher, 0 on a standby.")
DEPENDENCY_UP = _g("fairway_dependency_up",
                   "1 while this process reaches the dependency (postgres, redis), 0 in an outage.",
                   ("dependency",), merge="livemin")  # 0 while any live API worker sees it down
JOBS_BY_STATUS = _g("fairway_jobs", "Jobs in a non-final status (from Postgres).",
                    ("status", "class"))
FAIR_SHARE = _g("fairway_fair_share_counter",
                "Weighted VTC counter per tenant (level 0 realtime, 1 batch).",
                ("tenant", "level"))
BATCHES = _g("fairway_batches", "Batches by status (non-final statuses).", ("status",))
QUEUED_JOBS = _g("fairway_queued_jobs",
                 "Jobs waiting to be placed (status queued in Postgres), by tenant, class and "
                 "tier.", ("tenant", "class", "tier"))
SLO_TARGET = _g("fairway_slo_target_seconds",
                "Each tenant plan's realtime SLO target (kind ttft or tpot), from the plans "
                "table.", ("tenant_tier", "kind"))
BATCH_REQUESTS = _g("fairway_batch_requests",
                    "Lines of in-progress batches, by tenant and state "
                    "(total, completed, failed, pending).", ("tenant", "state"))
# Fairness over the last FAIRNESS_WINDOW_S (service.store.telemetry.fairness), refreshed by
# the active dispatcher.
FAIRNESS_JAIN = _g("fairway_fairness_jain_index",
                   "Jain's index of tenants' service / weighted max-min fair share, per class, "
                   "over the last 5 minutes (1 = every tenant got its fair share).", ("class",))
TENANT_SERVICE = _g("fairway_tenant_service_rate",
                    "Weighted tokens a second (input + 2 x output) served to the tenant over "
                    "the last 5 minutes.", ("tenant", "class"))
TENANT_SHARE_RATIO = _g("fairway_tenant_fair_share_ratio",
                        "Tenant's service / its weighted max-min fair share over the last 5 "
                        "minutes (below 1: served less than its share).", ("tenant", "class"))
TENANT_QUEUE_WAIT = _g("fairway_tenant_queue_wait_seconds",
                       "Queue wait (queued -> placed) of the tenant's jobs that ended in the "
                       "last 5 minutes (quantile 0.5, 0.99), and its oldest queued job's wait "
                       "now (quantile 1).", ("tenant", "class", "quantile"))
WEBHOOK_ATTEMPTS = _c("fairway_webhook_attempts",
                      "Webhook delivery attempts by outcome: delivered, retry (failed, tried "
                      "again later) or failed (failed, retry window over).", ("outcome",))


# -- autoscaling (the active dispatcher, scheduler.autoscale; KEDA scales workers on it) -------
DESIRED_WORKERS = _g("fairway_desired_workers",
                     "Workers a model wants now, with why (realtime, batch_deadline, wake, idle, "
                     "min_workers): one series per model, its reason's.",
                     ("model_name", "reason"))
AUTOSCALE_REALTIME_WORKERS = _g(
    "fairway_autoscale_realtime_workers",
    "Workers realtime alone asks for (fractional): its engine time, slots and predicted TTFT.",
    ("model_name",))
AUTOSCALE_BATCH_WORKERS = _g(
    "fairway_autoscale_batch_workers",
    "Workers the open batch work asks for to meet its deadlines (fractional).", ("model_name",))
AUTOSCALE_BATCH_WORK = _g(
    "fairway_autoscale_batch_work_seconds",
    "Open batch work of a model, in one worker's engine seconds at full batch.", ("model_name",))
AUTOSCALE_REALTIME_BUSY = _g(
    "fairway_autoscale_realtime_busy",
    "Engine seconds of realtime work per second over the last minute (ended jobs' tokens).",
    ("model_name",))


def exported_metric_names() -> set[str]:
    """Every sample name /metrics can carry (with _total, _bucket, ... suffixes)."""
    names: set[str] = set()
    for metric in REGISTRY.collect():
        names.add(metric.name)
        if metric.type == "counter":
            names.update({metric.name + "_total", metric.name + "_created"})
        elif metric.type == "histogram":
            names.update(metric.name + s for s in ("_bucket", "_sum", "_count", "_created"))
    from service.store.telemetry.slo import SLO_WINDOW_METRICS

    return names | set(SLO_WINDOW_METRICS)
