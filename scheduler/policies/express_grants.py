"""The express path's room: where a model's next realtime jobs would go at once, lent to the
API as tickets so that it places them at insert (``SchedulingPolicy.express``).

A ticket is lent only where the policy itself would place a new realtime job without waiting:
the model's realtime level is empty (nothing queued ahead that fair share or deadlines would
order first) and a worker has a free slot. The worker is the one ``Placer`` picks for a small
probe job (the earliest predicted first token, lanes first), so a lent ticket follows the
same placement rule as a pass, without the prefix affinity a known prompt would add.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.policies.fleet import Fleet
from scheduler.policies.placement import Placer
from scheduler.types import ExpressGrant, JobClass, JobView

# The probe's size: placement by slots and step clocks, not by a prompt no one has sent yet.
_PROBE_TOKENS = 1


def express_grants(fleet: Fleet, placer: Placer, now: float, held: Mapping[str, int],
                   per_model: int) -> list[ExpressGrant]:
    grants: list[ExpressGrant] = []
    if per_model < 1:
        return grants
    for model, pool in fleet.pools.items():
        if pool.rt_queued or not pool.workers:  # jobs wait: a pass orders them first
            continue
        ws = placer.place(_probe(model, now), 0, now)
        if ws is None:
            continue
        room = ws.free_slots() - held.get(ws.worker_id, 0)
        if room >= 1:
            grants.append(ExpressGrant(model, ws.worker_id, min(per_model, room)))
    return grants


def _probe(model: str, now: float) -> JobView:
    return JobView("express-probe", "", JobClass.REALTIME, priority=0, model=model,
                   arrival=now, deadline=None, prompt_tokens=_PROBE_TOKENS,
                   max_tokens=_PROBE_TOKENS)
