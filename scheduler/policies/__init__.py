"""Policy implementations and the one factory the dispatcher and simulator use."""

from __future__ import annotations

from scheduler.interface import PolicyKind, SchedulingPolicy
from scheduler.policies.config import FairwayConfig
from scheduler.policies.fairway import FairwayPolicy
from scheduler.policies.simple import OrderedPolicy

__all__ = ["FairwayConfig", "FairwayPolicy", "OrderedPolicy", "make_policy"]


def make_policy(kind: PolicyKind | str, config: FairwayConfig | None = None) -> SchedulingPolicy:
    """``config`` tunes the Fairway policy; the baselines have nothing to tune."""
    kind = PolicyKind(kind)
    if kind is PolicyKind.FCFS:
        return OrderedPolicy(by_priority=False)
    if kind is PolicyKind.PRIORITY:
        return OrderedPolicy(by_priority=True)
    return FairwayPolicy(config)
