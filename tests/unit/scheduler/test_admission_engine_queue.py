"""Admission sees the realtime prefill queued inside the engines: realtime assigned and still
without its first token (``on_first_token``) counts ahead of a new realtime job, in the
policy's own check and in the outlook the API's door admits with."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from scheduler.outlook import door_refusal, predict_new_ttft
from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Scenario
from scheduler.types import Reject
from tests.unit.scheduler.sched_helpers import assigns, rt, worker

SCENARIOS = Path(__file__).resolve().parents[3] / "bench" / "scenarios"
BURST, PROMPT = 10, 1000  # 10 x 1000 tokens on 2 workers: 0.5 s of prefill (1e-4 s a token)


def _burst_placed(policy: FairwayPolicy | None = None) -> FairwayPolicy:
    policy = policy or FairwayPolicy()
    for wid in ("w1", "w2"):
        policy.on_worker_heartbeat(worker(wid, slots=16))
    for i in range(BURST):
        policy.on_job_arrived(rt(f"b{i}", prompt=PROMPT, slo=100.0))
    assert len(assigns(policy.schedule(0.0))) == BURST  # placed at once: none queued here
    return policy


def _rejected(policy: FairwayPolicy, job_id: str, at: float) -> bool:
    policy.on_job_arrived(rt(job_id, at=at, prompt=100, slo=0.3))
    return any(isinstance(d, Reject) and d.job_id == job_id for d in policy.schedule(at))


def test_assigned_realtime_without_a_first_token_is_refused_behind() -> None:
    policy = _burst_placed()
    assert _rejected(policy, "late", 0.0)  # 0.5 s of the burst's prefill ahead, SLO 0.3 s
    for i in range(BURST):
        policy.on_first_token(f"b{i}")
    assert not _rejected(policy, "after", 0.0)  # prefills done: only decodes are left


def test_the_outlook_counts_the_engines_queue_until_first_tokens() -> None:
    policy = _burst_placed()
    (busy,) = policy.outlook(0.0)
    assert busy.rt_queued_prefill == BURST * PROMPT
    assert door_refusal(busy, prompt_tokens=100, target_s=0.4) is not None
    for i in range(BURST):
        policy.on_first_token(f"b{i}")
        policy.on_first_token(f"b{i}")  # told twice: counted off once
    (calm,) = policy.outlook(0.0)
    assert calm.rt_queued_prefill == 0
    assert predict_new_ttft(calm, prompt_tokens=100) < predict_new_ttft(busy, prompt_tokens=100)
    assert door_refusal(calm, prompt_tokens=100, target_s=0.4) is None


def test_a_job_that_ends_or_whose_worker_is_lost_leaves_the_engines_queue() -> None:
    policy = _burst_placed()
    pool = policy.fleet.pools["m"]
    policy.on_job_finished("b0", policy.worker_of("b0") or "", PROMPT, 0)  # failed early
    assert (pool.rt_engine_queued, pool.rt_engine_prefill) == (BURST - 1, (BURST - 1) * PROMPT)
    policy.on_first_token("b1")
    policy.on_job_finished("b1", policy.worker_of("b1") or "", PROMPT, 5)  # not counted twice
    assert pool.rt_engine_prefill == (BURST - 2) * PROMPT
    policy.on_worker_lost("w1")
    policy.on_worker_lost("w2")
    assert (pool.rt_engine_queued, pool.rt_engine_prefill) == (0, 0)


def test_the_simulator_reports_first_tokens_as_engines_produce_them() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_rt_under_batch.json")
    scenario.duration_s, scenario.drain_s = 30, 0  # stop with realtime mid-flight
    sim = Simulation(scenario, "fairway")
    sim.run()
    assert isinstance(sim.policy, FairwayPolicy)
    pool = sim.policy.fleet.pools[scenario.model]
    waiting = [s for e in sim.engines.values() for s in (*e.running, *e.waiting)
               if s.is_realtime and not s.first_token]
    decoding = [s for e in sim.engines.values() for s in e.running
                if s.is_realtime and s.first_token]
    assert decoding, "the run should stop with realtime decoding"
    assert pool.rt_engine_prefill == sum(s.prompt for s in waiting)


def test_a_job_that_failed_before_its_engine_ran_teaches_no_sizes() -> None:
    """A worker reports 0/0 usage for a job it refused (a prompt past the context window):
    unknown, not an empty job, so the mean realtime size and the tenant's answer lengths
    keep what they were."""
    policy = _burst_placed(FairwayPolicy(FairwayConfig(length_aware=True)))
    for i in (1, 2, 3):  # enough answers of 10 tokens for the tenant's length to be learnt
        policy.on_job_finished(f"b{i}", policy.worker_of(f"b{i}") or "", PROMPT, 10)
    sizes, lengths = policy.admission.realtime_size, policy.waiting.lengths
    before = (sizes.prompt_tokens, sizes.output_tokens, lengths.predict("a", PROMPT, 64))
    assert before[2] == 10
    policy.on_job_finished("b0", policy.worker_of("b0") or "", 0, 0)
    assert (sizes.prompt_tokens, sizes.output_tokens, lengths.predict("a", PROMPT, 64)) == before


def _queued_rejection(policy: FairwayPolicy, job_id: str, *, max_wait_s: float,
                      deadline: float | None = None) -> Reject | None:
    """A plan in ``queue`` mode: the job's target (0.3 s) only orders work."""
    job = replace(rt(job_id, prompt=100, slo=0.3), max_wait_s=max_wait_s, deadline=deadline)
    policy.on_job_arrived(job)
    return next((d for d in policy.schedule(0.0)
                 if isinstance(d, Reject) and d.job_id == job_id), None)


def test_queue_mode_waits_within_its_budget_and_refuses_past_it() -> None:
    policy = _burst_placed()  # ~0.5 s of prefill ahead: shed mode refuses a 0.3 s target
    assert _queued_rejection(policy, "patient", max_wait_s=5.0) is None
    refused = _queued_rejection(_burst_placed(), "hurried", max_wait_s=0.1)
    assert refused is not None and refused.reason == "queue_wait_exceeded"
    late = _queued_rejection(_burst_placed(), "due", max_wait_s=5.0, deadline=0.35)
    assert late is not None and late.reason == "deadline_unreachable"
