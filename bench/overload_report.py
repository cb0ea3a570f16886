"""What bench/overload.py reports beyond latency: how honest the door was.

- accepted attainment: accepted requests whose first token came within their plan's target
  (at the client);
- refusals that would have met: the same arrivals (same seed, or the same burst) with the
  door off meet their target N times per plan; with it on, M accepted requests meet it; the
  N - M more that the pool served in time without the door are refusals that would have met.
  A floor, not an exact count: with the door off the queue grows past every target, which
  costs some of those N;
- the predictor's error: each accepted request's TTFT over the door's prediction stored on its
  job (``jobs.predicted_ttft_ms``), at the client and from the job row.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from harness import pct
from sqlalchemy import text

from service.store.db import sync_session


class Sent(Protocol):
    plan: str
    status: int
    ttft_s: float | None
    job_hex: str | None


def met(o: Sent, targets: Mapping[str, float]) -> bool:
    return o.ttft_s is not None and o.ttft_s <= targets[o.plan]


def met_count(outs: Sequence[Sent], targets: Mapping[str, float], plan: str) -> int:
    return sum(o.status == 200 and met(o, targets) for o in outs if o.plan == plan)


def honesty(outs: Sequence[Sent], targets: Mapping[str, float],
            door_off: Sequence[Sent] | None = None) -> None:
    """Accepted attainment per plan and, given the same arrivals with the door off, the
    refusals that would have met their target."""
    accepted = [o for o in outs if o.status == 200]
    refused = [o for o in outs if o.status == 429]
    for plan, target in targets.items():
        mine = [o for o in accepted if o.plan == plan]
        if mine:
            share = sum(met(o, targets) for o in mine) / len(mine)
            print(f"  {plan:<9} accepted attainment (TTFT <= {target:g} s at the client): "
                  f"{100 * share:.1f}% of {len(mine)}")
    if door_off is None or not refused:
        return
    would, met_off = would_have_met(outs, targets, door_off)
    print(f"  refusals that would have met their target (met with the door off, minus met "
          f"with it on): {would} of {len(refused)} refused = "
          f"{100 * would / len(refused):.1f}% of refusals, {100 * would / len(outs):.1f}% "
          f"of all requests, {100 * would / max(1, met_off):.1f}% of the {met_off} that "
          f"met with the door off")


def would_have_met(outs: Sequence[Sent], targets: Mapping[str, float],
                   door_off: Sequence[Sent]) -> tuple[int, int]:
    """(refusals that would have met, requests that met with the door off): per plan, how
    many more met their target without the door than with it (a floor), summed."""
    met_off = {p: met_count(door_off, targets, p) for p in targets}
    would = sum(max(0, met_off[p] - met_count(outs, targets, p)) for p in targets)
    return would, sum(met_off.values())


def prediction_error(database_url: str, outs: Sequence[Sent],
                     targets: Mapping[str, float] | None = None) -> None:
    """TTFT over the door's stored prediction, per accepted request (p10/p50/p90), and, with
    ``targets``, accepted attainment judged from the job rows (created -> first token): what
    the service did, apart from the load generator's own delays on a shared box."""
    by_job = {uuid.UUID(o.job_hex): o for o in outs if o.status == 200 and o.job_hex}
    if not by_job:
        return
    query = text("SELECT id, predicted_ttft_ms, "
                 "extract(epoch FROM first_token_at - created_at) FROM jobs "
                 "WHERE id = ANY(:ids) AND predicted_ttft_ms > 0")
    with sync_session(database_url) as session:
        rows: list[Any] = list(session.execute(query, {"ids": list(by_job)}))
    client = [by_job[r[0]].ttft_s / (r[1] / 1000) for r in rows
              if by_job[r[0]].ttft_s is not None]
    row = [float(r[2]) / (r[1] / 1000) for r in rows if r[2] is not None]
    if targets:
        for plan, target in targets.items():
            mine = [float(r[2]) for r in rows if r[2] is not None and by_job[r[0]].plan == plan]
            if mine:
                share = sum(t <= target for t in mine) / len(mine)
                print(f"  {plan:<9} accepted attainment from the job rows (created -> first "
                      f"token <= {target:g} s): {100 * share:.1f}% of {len(mine)}")
    if not client:
        print("  predictor: no accepted request carried a prediction (no outlook yet?)")
        return
    print(f"  predictor: TTFT / predicted over {len(client)} accepted requests, at the client "
          f"p10 {pct(client, 10):.2f} p50 {pct(client, 50):.2f} p90 {pct(client, 90):.2f}; "
          f"from the job row p10 {pct(row, 10):.2f} p50 {pct(row, 50):.2f} "
          f"p90 {pct(row, 90):.2f} (1 = exact, above 1 = under-estimated)")
