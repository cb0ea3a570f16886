"""The API's side of the door's calibration (scheduler.ttft_calibration): a request the
door judged reports when its first token came.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CalibratingObserver:
    """A request's observer (service.observability.requests) that also tells the gate when
    its first token came, whether or not metrics are on: calibration must not depend on
    them."""

    __slots__ = ("_first_token", "_inner", "_started", "_told")

    def __init__(self, inner: Any, first_token: Callable[[float], None], started: float
                 ) -> None:
        self._inner = inner
        self._first_token = first_token
        self._started = started
        self._told = False

    async def around(self, work: Awaitable[T]) -> T:
        result: T = await self._inner.around(work)
        return result

    def wrap(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        wrapped: AsyncIterator[bytes] = self._inner.wrap(stream)
        return wrapped

    def first_token(self) -> None:
        self._inner.first_token()
        if not self._told:
            self._told = True
            self._first_token(time.perf_counter() - self._started)

    def finished(self, *, ok: bool, completion_tokens: int = 0) -> None:
        self._inner.finished(ok=ok, completion_tokens=completion_tokens)


def calibrating(inner: Any, *, gate: Any, model: str, predicted_ttft_s: float | None,
                started: float) -> Any:
    """``inner``, or, for a request the door judged, ``inner`` reporting its first token to
    ``gate`` (service.api.slo_gate.SloGate.first_token)."""
    if predicted_ttft_s is None:
        return inner
    return CalibratingObserver(inner, lambda ttft_s: gate.first_token(
        model, ttft_s=ttft_s, predicted_ttft_s=predicted_ttft_s), started)
