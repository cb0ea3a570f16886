"""LoRA adapters in placement (scheduler/policies/adapters.py, adapter_placement.py): warm
first, unless a cold worker's first token comes sooner after the load; one load per burst;
adapter slots; the adapter-blind flag; the ledger's bound."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import assigns, batch, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.policies.adapters import AdapterLedger, cpu_capacity
from scheduler.types import JobView, WorkerView

AWARE = FairwayConfig(headroom_enabled=False, adapter_load_s=0.3)
BLIND = FairwayConfig(headroom_enabled=False, adapter_load_s=0.3, adapter_aware=False)


def lora_worker(
    worker_id: str, *, slots: int = 8, running: int = 0, adapters: tuple[str, ...] = (),
    max_loras: int = 2, max_cpu_loras: int = 4,
) -> WorkerView:
    return replace(worker(worker_id, slots=slots, running=running), adapters=adapters,
                   max_loras=max_loras, max_cpu_loras=max_cpu_loras)


def with_adapter(job: JobView, adapter: str) -> JobView:
    job.adapter = adapter
    return job


def fleet(config: FairwayConfig, *views: WorkerView) -> FairwayPolicy:
    policy = FairwayPolicy(config)
    for view in views:
        policy.on_worker_heartbeat(view)
    return policy


def test_a_warm_worker_is_preferred_to_a_less_loaded_cold_one() -> None:
    views = (lora_worker("cold"), lora_worker("warm", running=3, adapters=("x",)))
    policy = fleet(AWARE, *views)
    policy.on_job_arrived(with_adapter(batch("j1"), "x"))
    assert assigns(policy.schedule(0.0)) == [("j1", "warm")]


def test_adapter_blind_placement_ignores_warmth() -> None:
    views = (lora_worker("cold"), lora_worker("warm", running=3, adapters=("x",)))
    policy = fleet(BLIND, *views)
    policy.on_job_arrived(with_adapter(batch("j1"), "x"))
    assert assigns(policy.schedule(0.0)) == [("j1", "cold")]  # least loaded


def test_realtime_goes_warm_when_its_step_ends_before_a_cold_load() -> None:
    policy = fleet(AWARE, lora_worker("cold"), lora_worker("warm", running=3, adapters=("x",)))
    policy.on_worker_step("warm", 9.99, 0.03)  # its step ends in 20 ms; the load takes 300
    policy.on_job_arrived(with_adapter(rt("r1", at=10.0), "x"))
    assert assigns(policy.schedule(10.0)) == [("r1", "warm")]


def test_realtime_pays_the_load_when_the_warm_worker_would_cost_its_slo() -> None:
    policy = fleet(AWARE, lora_worker("cold"), lora_worker("warm", running=3, adapters=("x",)))
    policy.on_worker_step("warm", 9.5, 2.0)  # a 2 s step with 1.5 s left: the load is sooner
    policy.on_job_arrived(with_adapter(rt("r1", at=10.0), "x"))
    assert assigns(policy.schedule(10.0)) == [("r1", "cold")]


def test_a_burst_for_a_cold_adapter_loads_it_on_one_worker() -> None:
    views = [lora_worker(f"w{i}", slots=32) for i in range(4)]
    for config, workers_used in ((AWARE, 1), (BLIND, 4)):
        policy = fleet(config, *views)
        for i in range(20):
            policy.on_job_arrived(with_adapter(batch(f"b{i}", tenant=f"t{i % 3}"), "y"))
        placed = Counter(w for _, w in assigns(policy.schedule(0.0)))
        assert sum(placed.values()) == 20
        assert len(placed) == workers_used
        loads = sum(ws.adapters.ledger.loads for ws in policy.fleet.workers.values())
        assert loads == workers_used


def test_a_realtime_burst_for_a_cold_adapter_mostly_waits_for_one_load() -> None:
    # The jobs' prefills queue one behind another in the policy's ledger (~19 ms each here):
    # once the queue on the loading worker outlasts a load (300 ms), a second load is sooner.
    for config, most, workers_used in ((AWARE, 16, 2), (BLIND, 5, 4)):
        policy = fleet(config, *[lora_worker(f"w{i}", slots=32) for i in range(4)])
        for i in range(20):
            policy.on_job_arrived(with_adapter(rt(f"r{i}", tenant=f"t{i % 3}"), "y"))
        placed = Counter(w for _, w in assigns(policy.schedule(0.0)))
        assert sum(placed.values()) == 20
        assert len(placed) == workers_used
        assert placed.most_common(1)[0][1] == most


def test_a_worker_without_a_free_adapter_slot_goes_last() -> None:
    # "busy" batches one adapter at a time and runs x; "free" is more loaded but has a slot.
    policy = fleet(AWARE, lora_worker("busy", max_loras=1),
                   lora_worker("free", running=3, max_loras=1))
    policy.on_job_arrived(with_adapter(batch("x1"), "x"))
    assert assigns(policy.schedule(0.0)) == [("x1", "busy")]
    policy.on_job_arrived(with_adapter(batch("y1"), "y"))
    assert assigns(policy.schedule(0.1)) == [("y1", "free")]
    # Another x still joins x's batch on "busy" (it holds a slot for x).
    policy.on_job_arrived(with_adapter(batch("x2"), "x"))
    assert assigns(policy.schedule(0.2)) == [("x2", "busy")]
    # With every slot taken by other adapters, the least loaded takes it and it waits there.
    policy.on_job_arrived(with_adapter(batch("z1"), "z"))
    assert assigns(policy.schedule(0.3)) == [("z1", "busy")]


def test_without_a_slot_anywhere_the_least_oversubscribed_worker_takes_a_new_adapter() -> None:
    policy = fleet(AWARE, lora_worker("a", max_loras=1),
                   lora_worker("b", running=3, max_loras=1))
    for n, (job_id, adapter) in enumerate((("x1", "x"), ("z1", "z"), ("y1", "y"))):
        policy.on_job_arrived(with_adapter(batch(job_id), adapter))
        policy.schedule(0.1 * n)
    jobs = {w: set(ws.adapters.jobs) for w, ws in policy.fleet.workers.items()}
    assert jobs == {"a": {"x", "y"}, "b": {"z"}}  # y had no slot anywhere: least loaded
    # w has no slot anywhere either: "b" holds fewer adapters beyond its slots.
    policy.on_job_arrived(with_adapter(batch("w1"), "w"))
    assert assigns(policy.schedule(1.0)) == [("w1", "b")]
    # x runs on "a": it batches there at once, though "a" is oversubscribed.
    policy.on_job_arrived(with_adapter(batch("x2"), "x"))
    assert assigns(policy.schedule(1.1)) == [("x2", "a")]


def test_a_beat_that_reports_adapters_replaces_the_ledger_but_keeps_those_in_use() -> None:
    policy = fleet(AWARE, lora_worker("w0", max_cpu_loras=3))
    policy.on_job_arrived(with_adapter(batch("j1"), "new"))
    policy.schedule(0.0)
    policy.on_worker_heartbeat(lora_worker("w0", running=1, adapters=("a", "b", "c"),
                                           max_cpu_loras=3))
    ledger = policy.fleet.workers["w0"].adapters.ledger
    assert list(ledger.ready_at) == ["b", "c", "new"]  # "new" is still loading: kept, newest
    assert ledger.wait_s("new", 0.1, 0.3) > 0.0
    assert ledger.wait_s("c", 0.1, 0.3) == 0.0
    # A beat that says nothing of LoRA leaves the ledger alone.
    policy.on_worker_heartbeat(worker("w0", running=1))
    assert list(ledger.ready_at) == ["b", "c", "new"]


def test_ledger_evicts_the_least_recently_used() -> None:
    ledger = AdapterLedger()
    for adapter in ("a", "b", "a", "c"):
        ledger.use(adapter, 0.0, 0.3, capacity=2)
    assert list(ledger.ready_at) == ["a", "c"]
    assert ledger.loads == 3


lora_worker_st = st.tuples(st.integers(1, 4), st.integers(0, 6), st.integers(1, 6))
step_st = st.tuples(
    st.sampled_from(["arrive", "arrive", "finish", "beat"]),
    st.integers(0, 11),  # adapter
    st.booleans(),  # realtime?
    st.lists(st.integers(0, 11), max_size=9),  # adapters a beat reports
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lora_worker_st, min_size=1, max_size=4), st.lists(step_st, max_size=40),
       st.booleans())
def test_no_worker_ever_holds_more_adapters_than_its_cache_by_the_ledger(
    shapes: list[tuple[int, int, int]], steps: list[tuple[str, int, bool, list[int]]],
    aware: bool,
) -> None:
    config = AWARE if aware else BLIND
    views = {f"w{i}": lora_worker(f"w{i}", slots=slots, max_loras=loras, max_cpu_loras=cpu)
             for i, (loras, cpu, slots) in enumerate(shapes)}
    policy = fleet(config, *views.values())
    placed: dict[str, str] = {}
    now = 0.0
    for n, (what, adapter, realtime, reported) in enumerate(steps):
        now += 0.05
        if what == "arrive":
            job = rt(f"j{n}", at=now) if realtime else batch(f"j{n}", at=now)
            policy.on_job_arrived(with_adapter(job, f"a{adapter}"))
            placed.update(assigns(policy.schedule(now)))
        elif what == "finish" and placed:
            job_id, worker_id = placed.popitem()
            policy.on_job_finished(job_id, worker_id, 100, 10)
        else:
            worker_id = sorted(views)[adapter % len(views)]
            view = replace(views[worker_id], adapters=tuple(f"a{a}" for a in reported))
            policy.on_worker_heartbeat(view)
        for ws in policy.fleet.workers.values():
            assert len(ws.adapters.ledger.ready_at) <= cpu_capacity(ws.view)
            assert sum(ws.adapters.jobs.values()) == sum(
                1 for item in ws.jobs.values() if item.job.adapter is not None)
