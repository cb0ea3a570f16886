"""Weighted Virtual Token Counters (Sheng et al., "Fairness in Serving LLMs", OSDI 2024).

A tenant's counter is the weighted service it received divided by its weight:
``(w_in * input + w_out * output) / weight``. The backlogged tenant with the smallest counter
goes next. A tenant coming back from idle is lifted to the smallest backlogged counter, so
being away banks no credit.

Counters are charged when a job is assigned, for its prompt and its full ``max_tokens``
(an upper bound, so a burst of assignments cannot outrun the counter), and corrected to the
real output when it finishes. A correction can lower a counter; every change bumps the
tenant's version so heap entries that carry the old value are recognised as stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class VirtualCounters:
    w_in: float = 1.0
    w_out: float = 2.0
    counters: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    # The counter of the last tenant picked: the lift target when nobody is backlogged.
    floor: float = 0.0

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return self.w_in * prompt_tokens + self.w_out * output_tokens

    def set_weight(self, tenant: str, weight: float) -> None:
        self.weights[tenant] = weight if weight > 0 else 1.0

    def value(self, tenant: str) -> float:
        return self.counters.get(tenant, self.floor)

    def version(self, tenant: str) -> int:
        return self.versions.get(tenant, 0)

    def charge(self, tenant: str, prompt_tokens: int, output_tokens: int) -> float:
        """Add weighted service (negative to refund); returns the normalized amount."""
        amount = self.cost(prompt_tokens, output_tokens) / self.weights.get(tenant, 1.0)
        self._set(tenant, self.value(tenant) + amount)
        return amount

    def note_pick(self, tenant: str) -> None:
        self.floor = self.value(tenant)

    def lift(self, tenant: str, min_backlogged: float | None) -> None:
        """Called when a tenant with nothing queued gets a job: no banked credit."""
        target = self.floor if min_backlogged is None else min_backlogged
        if tenant not in self.counters or self.counters[tenant] < target:
            self._set(tenant, max(self.counters.get(tenant, target), target))

    def _set(self, tenant: str, value: float) -> None:
        self.counters[tenant] = value
        self.versions[tenant] = self.versions.get(tenant, 0) + 1
