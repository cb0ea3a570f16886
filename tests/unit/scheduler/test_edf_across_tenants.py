"""EDF across tenants at the realtime level: within the slack of the smallest counter, the
earliest first-token deadline goes first; past it, weighted fair share binds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import assigns, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.types import Assign

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Large targets: no job is refused, so only the order is under test.
TIGHT, LOOSE = 100.0, 400.0


def one_slot_policy(slack: float) -> FairwayPolicy:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False, edf_slack_units=slack))
    policy.on_worker_heartbeat(worker("w", slots=1, kv=10**9))
    return policy


def serve_one_at_a_time(policy: FairwayPolicy, rounds: int) -> list[str]:
    """Run ``rounds`` passes on a one-slot pool, finishing each assigned job before the next
    pass; the tenants in the order they were served."""
    served: list[str] = []
    for step in range(rounds):
        for job_id, worker_id in assigns(policy.schedule(float(step))):
            served.append(job_id.split("-")[0])
            policy.on_job_finished(job_id, worker_id, 0, 0)
    return served


def test_a_tighter_target_goes_first_though_its_tenant_was_served_more() -> None:
    policy = one_slot_policy(slack=4096)
    policy.on_job_arrived(rt("tight-0", "tight", slo=TIGHT))
    assert serve_one_at_a_time(policy, 1) == ["tight"]  # tight's counter is now 200 ahead
    policy.on_job_arrived(rt("loose-1", "loose", at=1.0, slo=LOOSE))
    policy.on_job_arrived(rt("tight-1", "tight", at=1.0, slo=TIGHT))
    assert serve_one_at_a_time(policy, 2) == ["tight", "loose"]


def test_without_slack_the_smaller_counter_goes_first() -> None:
    policy = one_slot_policy(slack=0)
    policy.on_job_arrived(rt("tight-0", "tight", slo=TIGHT))
    assert serve_one_at_a_time(policy, 1) == ["tight"]
    policy.on_job_arrived(rt("loose-1", "loose", at=1.0, slo=LOOSE))
    policy.on_job_arrived(rt("tight-1", "tight", at=1.0, slo=TIGHT))
    assert serve_one_at_a_time(policy, 2) == ["loose", "tight"]


def test_fair_share_binds_past_the_slack() -> None:
    # Each job is charged 100 + 2 * 50 = 200 units: with a 1000-unit slack the tight tenant
    # runs ahead by the slack (five jobs, the sixth ties) and then the two alternate.
    policy = one_slot_policy(slack=1000)
    for n in range(12):
        policy.on_job_arrived(rt(f"tight-{n}", "tight", at=n * 1e-3, slo=TIGHT))
        policy.on_job_arrived(rt(f"loose-{n}", "loose", at=n * 1e-3, slo=LOOSE))
    served = serve_one_at_a_time(policy, 24)
    assert served[:6] == ["tight"] * 6
    tail = served[6:18]
    assert tail.count("tight") == tail.count("loose") == 6


def test_equal_deadlines_go_to_the_smaller_counter() -> None:
    policy = one_slot_policy(slack=4096)
    policy.on_job_arrived(rt("a-0", "a", slo=TIGHT / 2))
    policy.on_job_arrived(rt("a-1", "a", slo=TIGHT))
    policy.on_job_arrived(rt("b-1", "b", slo=TIGHT))
    assert serve_one_at_a_time(policy, 3) == ["a", "b", "a"]


def test_across_models_the_earliest_deadline_goes_first() -> None:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    policy.on_worker_heartbeat(worker("w", slots=1, kv=10**9, models=("m", "n")))
    policy.on_job_arrived(rt("loose", "b", slo=LOOSE, model="m"))
    policy.on_job_arrived(rt("tight", "a", at=1.0, slo=TIGHT, model="n"))
    assert assigns(policy.schedule(1.0)) == [("tight", "w")]


@FAST
@given(
    st.lists(st.floats(0.5, 4.0), min_size=2, max_size=4),
    st.lists(st.tuples(st.integers(1, 400), st.integers(1, 200)), min_size=4, max_size=20),
    st.integers(1, 3),
    st.lists(st.integers(0, 10), min_size=5, max_size=60),
    st.sampled_from([0.0, 500.0, 4096.0]),
)
def test_the_counter_gap_stays_within_the_slack_and_one_charge(
    weights, sizes, slots, picks, slack
) -> None:
    """The bound docs/scheduler.md states for the realtime level, with targets that differ
    by tenant (the first tenant's are the tightest, so EDF favours it as far as it may)."""
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False, edf_slack_units=slack))
    policy.on_worker_heartbeat(worker("w", slots=slots, kv=10**9))
    tenants = [f"t{i}" for i in range(len(weights))]
    for n, (prompt, out) in enumerate(sizes):
        for t, w in enumerate(weights):
            policy.on_job_arrived(rt(f"{tenants[t]}-{n}", tenants[t], at=n * 1e-3,
                                     prompt=prompt, out=out, weight=w, slo=100.0 * (t + 1)))
    max_cost = max((p + 2 * o) / w for p, o in sizes for w in weights)
    queued = {t: len(sizes) for t in range(len(weights))}
    service = [0.0] * len(weights)
    running: list[tuple[str, str]] = []
    for step, pick in enumerate(picks):
        for d in policy.schedule(float(step)):
            assert isinstance(d, Assign)
            t = tenants.index(d.job_id.split("-")[0])
            prompt, out = sizes[int(d.job_id.split("-")[1])]
            service[t] += (prompt + 2 * out) / weights[t]
            queued[t] -= 1
            running.append((d.job_id, d.worker_id))
        if all(queued.values()):
            assert max(service) - min(service) <= slack + 2 * max_cost
        if running:
            job_id, worker_id = running.pop(pick % len(running))
            policy.on_job_finished(job_id, worker_id, 0, 0)
