"""The door's predictor, calibrated on the engine it predicts: each model's predictions are
scaled by what its requests' first tokens actually took against them.

The outlook predicts from the workers' cost profile, which is a model of an engine, not the
engine: the simulated engine's prefill, prefix caching of shared prompts, a GPU that is not
the profiled one, and in the simulator the engine's own queueing, which the outlook sums up
in means. Under `shed` admission a prediction several times too high refuses what would have
met its target (bench/overload.py: TTFT / predicted p50 0.16 on the sim stack, a quarter of
all requests refused that would have met), and one too low admits what then misses. Each
request's first token reports its TTFT over the uncalibrated prediction, and the model's
factor tracks a high quantile (QUANTILE) of that ratio (in logs, by stochastic
approximation: up a step when a ratio is above it, down when below, in the quantile's
proportion), bounded. Every later prediction is multiplied by it, so a prediction is what
nine requests in ten stay under, and the door's bar below the target
(scheduler.outlook.ADMIT_BELOW) covers the rest of the tail: a mean-calibrated prediction
admitted a quarter of its requests past their target. The feedback is stable: a factor that
admits too much raises the TTFTs it learns from.

Pure: the API's door (service.api.slo_gate) and the simulator's (scheduler.sim.runner) feed
it the same way.
"""

from __future__ import annotations

import math
from collections import defaultdict

QUANTILE = 0.9
STEP = 0.1  # log units per observation up; down, a ninth of it (the quantile's proportion)
BOUNDS = (0.1, 10.0)  # a factor past these says the profile is wrong, not the load
MIN_RATIO_S = 0.001  # TTFTs or predictions under a millisecond teach nothing


class TtftCalibration:
    def __init__(self, quantile: float = QUANTILE, step: float = STEP,
                 bounds: tuple[float, float] = BOUNDS) -> None:
        self._quantile = quantile
        self._step = step
        self._low, self._high = math.log(bounds[0]), math.log(bounds[1])
        self._log_factor: dict[str, float] = defaultdict(float)
        self.observed: dict[str, int] = defaultdict(int)

    def factor(self, model: str) -> float:
        """What to multiply ``model``'s predictions by (1 before anything was observed)."""
        return math.exp(self._log_factor.get(model, 0.0))

    def observe(self, model: str, *, actual_s: float, raw_predicted_s: float) -> None:
        """One request's TTFT and the prediction it was admitted on, before calibration."""
        if actual_s < MIN_RATIO_S or raw_predicted_s < MIN_RATIO_S:
            return
        ratio = math.log(actual_s / raw_predicted_s)
        at = self._log_factor[model]
        moved = at + self._step * (self._quantile - (1.0 if ratio <= at else 0.0)) / max(
            self._quantile, 1 - self._quantile)
        self._log_factor[model] = min(self._high, max(self._low, moved))
        self.observed[model] += 1
