"""Property tests of the policy's invariants (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import batch, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.types import Assign, Decision, JobClass, JobView, Preempt, Reject, WorkerView

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

worker_st = st.tuples(
    st.integers(1, 4),  # slots
    st.integers(500, 5000),  # kv capacity
    st.sampled_from([("m",), ("n",), ("m", "n")]),
    st.integers(0, 2),  # running reported by the engine
    st.integers(0, 400),  # kv used reported by the engine
)
job_st = st.tuples(
    st.booleans(),  # realtime?
    st.sampled_from(["m", "n"]),
    st.integers(1, 1500),
    st.integers(1, 500),
    st.sampled_from(["a", "b", "c"]),
)


@dataclass
class Ledger:
    """An independent account of what the decisions did to each worker."""

    views: dict[str, WorkerView]
    jobs: dict[str, JobView] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)  # job -> worker

    def apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if isinstance(d, Preempt):
                assert self.jobs[d.job_id].job_class is JobClass.BATCH
                assert self.placed.pop(d.job_id) == d.worker_id
            elif isinstance(d, Assign):
                assert d.job_id not in self.placed
                self.placed[d.job_id] = d.worker_id
            elif isinstance(d, Reject):
                assert d.retry_after_s > 0

    def room(self, worker_id: str) -> tuple[int, int]:
        view = self.views[worker_id]
        mine = [self.jobs[j] for j, w in self.placed.items() if w == worker_id]
        used = max(view.running, len(mine))
        kv = max(view.kv_used_tokens, sum(j.prompt_tokens + j.max_tokens for j in mine))
        return view.max_slots - used, view.kv_capacity_tokens - kv


def make_pool(specs: list[tuple[int, int, tuple[str, ...], int, int]], config: FairwayConfig):
    policy = FairwayPolicy(config)
    views = {}
    for i, (slots, kv, models, running, kv_used) in enumerate(specs):
        view = worker(
            f"w{i}", slots=slots, kv=kv, models=models, running=min(running, slots), kv_used=kv_used
        )
        views[view.worker_id] = view
        policy.on_worker_heartbeat(view)
    return policy, Ledger(views)


def make_job(i: int, spec: tuple[bool, str, int, int, str], at: float) -> JobView:
    is_rt, model, prompt, out, tenant = spec
    if is_rt:
        return rt(f"j{i}", tenant, at=at, prompt=prompt, out=out, model=model, slo=60.0)
    return batch(f"j{i}", tenant, at=at, prompt=prompt, out=out, model=model)


@FAST
@given(
    st.lists(worker_st, min_size=1, max_size=5),
    st.lists(job_st, max_size=30),
    st.lists(st.booleans(), max_size=30),
)
def test_work_conserving_and_within_capacity(workers, jobs, finish_mask) -> None:
    policy, ledger = make_pool(workers, FairwayConfig(headroom_enabled=False))
    for round_no in range(2):
        for i, spec in enumerate(jobs):
            job = make_job(i + 100 * round_no, spec, at=float(round_no))
            ledger.jobs[job.job_id] = job
            policy.on_job_arrived(job)
        decisions = policy.schedule(float(round_no))
        ledger.apply(decisions)
        rejected = {d.job_id for d in decisions if isinstance(d, Reject)}
        for worker_id in ledger.views:
            slots, kv = ledger.room(worker_id)
            assert slots >= 0 and kv >= 0, "placement exceeded capacity"
        for job_id, job in ledger.jobs.items():
            if job_id in ledger.placed or job_id in rejected or policy.level_of(job_id) is None:
                continue
            for worker_id, view in ledger.views.items():
                if job.model in view.models:
                    slots, kv = ledger.room(worker_id)
                    assert not (slots >= 1 and kv >= job.prompt_tokens + job.max_tokens), (
                        f"{job_id} waits though {worker_id} has room"
                    )
        for (job_id, worker_id), done in zip(
            list(ledger.placed.items()), finish_mask, strict=False
        ):
            if done:
                del ledger.placed[job_id]
                policy.on_job_finished(job_id, worker_id, 0, 0)


@FAST
@given(
    st.lists(st.sampled_from([1.0, 2.0, 4.0]), min_size=2, max_size=4),
    st.lists(st.tuples(st.integers(1, 400), st.integers(1, 200)), min_size=40, max_size=40),
    st.integers(1, 3),
    st.lists(st.integers(0, 10), min_size=60, max_size=60),
)
def test_vtc_gap_between_backlogged_tenants_is_bounded(weights, sizes, slots, picks) -> None:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    policy.on_worker_heartbeat(worker("w", slots=slots, kv=10**9))
    tenants = [f"t{i}" for i in range(len(weights))]
    owner: dict[str, int] = {}
    for n, (prompt, out) in enumerate(sizes):
        for t, w in enumerate(weights):
            job_id = f"{tenants[t]}-{n}"
            owner[job_id] = t
            policy.on_job_arrived(batch(job_id, tenants[t], prompt=prompt, out=out, weight=w))
    max_cost = max((p + 2 * o) / w for p, o in sizes for w in weights)
    queued = {t: len(sizes) for t in range(len(weights))}
    service = [0.0] * len(weights)
    running: list[tuple[str, str]] = []
    for step, pick in enumerate(picks):
        for d in policy.schedule(float(step)):
            assert isinstance(d, Assign)
            t = owner[d.job_id]
            prompt, out = sizes[int(d.job_id.split("-")[1])]
            service[t] += (prompt + 2 * out) / weights[t]
            queued[t] -= 1
            running.append((d.job_id, d.worker_id))
        if all(queued.values()):
            assert max(service) - min(service) <= 2 * max_cost
        if running:
            job_id, worker_id = running.pop(pick % len(running))
            policy.on_job_finished(job_id, worker_id, 0, 0)


@FAST
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["rt", "batch", "finish", "tick"]),
            st.integers(1, 800),
            st.integers(0, 50),
        ),
        max_size=60,
    )
)
def test_no_realtime_job_is_ever_a_victim(ops) -> None:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    for i in range(2):
        policy.on_worker_heartbeat(worker(f"w{i}", slots=2, kv=3000))
    classes: dict[str, JobClass] = {}
    placed: dict[str, str] = {}
    now = 0.0
    for i, (op, size, pick) in enumerate(ops):
        now += 0.1
        if op in ("rt", "batch"):
            tenant, out = f"t{pick % 3}", size // 2
            if op == "rt":
                job = rt(f"j{i}", tenant, at=now, prompt=size, out=out, slo=30.0)
            else:
                job = batch(f"j{i}", tenant, at=now, prompt=size, out=out)
            classes[job.job_id] = job.job_class
            policy.on_job_arrived(job)
        elif op == "finish" and placed:
            job_id = sorted(placed)[pick % len(placed)]
            policy.on_job_finished(job_id, placed.pop(job_id), 0, 0)
        for d in policy.schedule(now):
            if isinstance(d, Preempt):
                assert classes[d.job_id] is JobClass.BATCH
                assert placed.pop(d.job_id) == d.worker_id
                policy.on_job_finished(d.job_id, d.worker_id, 0, 0)
                policy.on_job_arrived(batch(d.job_id, at=now))
            elif isinstance(d, Assign):
                placed[d.job_id] = d.worker_id


@FAST
@given(st.floats(20.0, 2000.0), st.integers(1, 4000), st.floats(0.5, 5.0))
def test_escalation_happens_before_the_deadline(deadline, out, tick) -> None:
    config = FairwayConfig(headroom_enabled=False)
    policy = FairwayPolicy(config)
    policy.on_worker_heartbeat(worker("w", slots=1))
    policy.on_job_arrived(rt("hog", slo=1e9, out=50_000))  # holds the only slot throughout
    policy.schedule(0.0)
    policy.on_job_arrived(batch("due", "b", out=out, deadline=deadline))
    now = 0.0
    while now < deadline and policy.level_of("due") == 1:
        policy.schedule(now)
        now += tick
    assert policy.level_of("due") == 0
    assert now - tick < deadline  # the pass that escalated it ran before the deadline
