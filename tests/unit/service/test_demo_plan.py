"""The banner's plan line says what the demo tenant's target means under its admission mode,
and on a CPU engine that a burst waits seconds."""

from __future__ import annotations

from service.cli.demo_plan import describe
from service.store.models.plans import Plan


def test_a_queueing_plan_reads_as_a_goal_with_its_wait_budget():
    line = describe(Plan(name="standard", ttft_slo_ms=1000, admission_mode="queue",
                         max_queue_wait_ms=30_000), cpu_engine=False)
    assert line.strip() == ("Plan          standard (tenant demo): first token in 1 s is a "
                            "goal; requests wait up to 30 s, then 429")


def test_a_shedding_plan_reads_as_a_limit_and_a_cpu_engine_adds_its_caveat():
    line = describe(Plan(name="premium", ttft_slo_ms=500, admission_mode="shed",
                         max_queue_wait_ms=30_000), cpu_engine=True)
    first, second = line.splitlines()
    assert "would wait past 0.5 s for its first token gets 429" in first
    assert "a burst on this CPU waits seconds" in second
