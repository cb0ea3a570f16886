"""Length-aware ordering (``FairwayConfig.length_aware``, off by default): an online
predictor of a job's output length per tenant and prompt-length bucket, and the queue key
that serves a tenant's shorter predicted batch jobs first, with aging.

Prediction: an exponentially weighted mean of the output tokens of the tenant's finished
jobs whose prompts fell in the same power-of-two bucket; before the bucket has seen
``min_samples`` jobs, the tenant's mean over all buckets; before that, nothing is known and
the job's ``max_tokens`` (the client's bound) stands in. Never above ``max_tokens``.

Ordering: a batch job at level 1 queues under a virtual arrival, its arrival plus
``length_aging_s_per_unit`` times its predicted cost (VTC units, w_in * prompt + w_out *
predicted output). A short job overtakes a long one that arrived shortly before it, and a
long one is overtaken only by jobs arriving within its shift of it: it ages past every job
that arrives later than that, so it cannot starve. Deadlines are not part of this key:
escalation (``waiting``) moves a job to level 0, where EDF rules, at its latest start.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Mean:
    value: float = 0.0
    samples: int = 0

    def observe(self, x: float, alpha: float) -> None:
        # The first samples average plainly, so one early outlier does not stick.
        self.samples += 1
        weight = max(alpha, 1.0 / self.samples)
        self.value += weight * (x - self.value)


@dataclass(slots=True)
class OutputLengthPredictor:
    alpha: float = 0.1
    min_samples: int = 3
    _by_bucket: dict[tuple[str, int], _Mean] = field(default_factory=dict)
    _by_tenant: dict[str, _Mean] = field(default_factory=dict)

    @staticmethod
    def bucket(prompt_tokens: int) -> int:
        """Power-of-two prompt-length bucket: 0 for 1 token, 10 for 1024-2047, ..."""
        return max(1, prompt_tokens).bit_length() - 1

    def observe(self, tenant: str, prompt_tokens: int, output_tokens: int) -> None:
        key = (tenant, self.bucket(prompt_tokens))
        self._by_bucket.setdefault(key, _Mean()).observe(output_tokens, self.alpha)
        self._by_tenant.setdefault(tenant, _Mean()).observe(output_tokens, self.alpha)

    def predict(self, tenant: str, prompt_tokens: int, max_tokens: int) -> float:
        for mean in (self._by_bucket.get((tenant, self.bucket(prompt_tokens))),
                     self._by_tenant.get(tenant)):
            if mean is not None and mean.samples >= self.min_samples:
                return min(float(max_tokens), mean.value)
        return float(max_tokens)
