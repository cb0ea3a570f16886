"""The one definition of SLO attainment: what a finished job is judged on, and how.

The API's and the workers' metrics (``fairway_slo_requests_total{kind}``) and the admin live
view (service.admin.live) all judge through ``judge``, so they cannot disagree about what
"met" means. Pure: numbers in, verdicts out.

A realtime job is judged against its tenant plan's targets, on each count separately:

| kind       | met when                                                                  |
|------------|---------------------------------------------------------------------------|
| ``ttft``   | it succeeded and arrival -> first token <= the plan's TTFT target          |
| ``tpot``   | it succeeded and (E2E - TTFT) / (output tokens - 1) <= the TPOT target;    |
|            | an answer of under two tokens has no time per output token: met            |
| ``both``   | ``ttft`` and ``tpot``: the combined figure                                |

A batch-class job (flex, a batch-file line) carries one target, its deadline:

| ``deadline`` | it succeeded and finished by its deadline                                 |

A job that did not succeed misses every kind it is judged on. A target of None (none set)
is met by any successful job.
"""

from __future__ import annotations

from dataclasses import dataclass

REALTIME_KINDS = ("ttft", "tpot", "both")
BATCH_KINDS = ("deadline",)
KINDS = REALTIME_KINDS + BATCH_KINDS
# The kind that says whether a job met every target it carries (goodput counts these).
COMBINED = {"realtime": "both", "batch": "deadline"}


@dataclass(frozen=True, slots=True)
class SloTargets:
    """A tenant plan's realtime targets, in seconds (the plans table keeps milliseconds)."""

    ttft_s: float | None
    tpot_s: float | None

    @classmethod
    def from_ms(cls, ttft_ms: float | None, tpot_ms: float | None) -> SloTargets:
        return cls(None if ttft_ms is None else ttft_ms / 1000,
                   None if tpot_ms is None else tpot_ms / 1000)


def tpot_seconds(*, e2e_s: float | None, ttft_s: float | None,
                 completion_tokens: int | None) -> float | None:
    """Time per output token as vLLM's benchmark defines it; None under two output tokens."""
    if e2e_s is None or ttft_s is None or not completion_tokens or completion_tokens < 2:
        return None
    return max(0.0, e2e_s - ttft_s) / (completion_tokens - 1)


def _within(value: float | None, target: float | None, *, absent_meets: bool) -> bool:
    if target is None:
        return True
    if value is None:
        return absent_meets
    return value <= target


def judge_realtime(*, succeeded: bool, ttft_s: float | None, tpot_s: float | None,
                   targets: SloTargets) -> dict[str, bool]:
    """{ttft, tpot, both} -> met. ``ttft_s`` None (no token ever came) misses the TTFT
    target; ``tpot_s`` None (under two tokens) meets the TPOT one."""
    ttft = succeeded and _within(ttft_s, targets.ttft_s, absent_meets=False)
    tpot = succeeded and _within(tpot_s, targets.tpot_s, absent_meets=True)
    return {"ttft": ttft, "tpot": tpot, "both": ttft and tpot}


def judge_deadline(*, succeeded: bool, e2e_s: float | None,
                   deadline_s: float | None) -> dict[str, bool]:
    """{deadline} -> met, for a batch-class job: ``deadline_s`` is arrival -> deadline."""
    return {"deadline": succeeded and _within(e2e_s, deadline_s, absent_meets=False)}


def judge(job_class: str, *, succeeded: bool, ttft_s: float | None = None,
          e2e_s: float | None = None, completion_tokens: int | None = None,
          targets: SloTargets | None = None, deadline_s: float | None = None
          ) -> dict[str, bool]:
    """Judge one finished job of ``job_class`` (realtime | batch); the kinds it is judged on
    map to met (True) or missed (False)."""
    if job_class == "realtime":
        tpot = tpot_seconds(e2e_s=e2e_s, ttft_s=ttft_s, completion_tokens=completion_tokens)
        return judge_realtime(succeeded=succeeded, ttft_s=ttft_s, tpot_s=tpot,
                              targets=targets or SloTargets(None, None))
    return judge_deadline(succeeded=succeeded, e2e_s=e2e_s, deadline_s=deadline_s)
