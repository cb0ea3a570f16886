"""A hand-off sent alongside its row's insert (worker.claim_ahead): the claim waits for the
row, claims once it is there, and gives up on a row that never appears."""

from __future__ import annotations

import asyncio
import time

from worker.claim_ahead import claim_when_committed


class Row:
    """A row that appears after ``appears_after`` looks, claimable or not."""

    def __init__(self, appears_after: int | None, claimable: bool = True) -> None:
        self.appears_after, self.claimable = appears_after, claimable
        self.looks = self.claims = 0

    async def exists(self) -> bool:
        self.looks += 1
        return self.appears_after is not None and self.looks > self.appears_after

    async def claim(self) -> str | None:
        self.claims += 1
        return "claimed" if self.claimable and self.looks > (self.appears_after or 0) else None


def test_it_claims_once_the_row_is_there() -> None:
    row = Row(appears_after=3)
    assert asyncio.run(claim_when_committed(row.claim, row.exists, wait_s=5)) == "claimed"
    assert (row.looks, row.claims) == (4, 1)  # one claim, after the row was seen


def test_a_row_there_but_not_this_attempts_is_stale_at_once() -> None:
    row = Row(appears_after=0, claimable=False)
    started = time.monotonic()
    assert asyncio.run(claim_when_committed(row.claim, row.exists, wait_s=5)) is None
    assert (row.looks, row.claims) == (1, 1)
    assert time.monotonic() - started < 1


def test_a_row_that_never_appears_is_given_up_after_the_wait() -> None:
    row = Row(appears_after=None)
    started = time.monotonic()
    assert asyncio.run(claim_when_committed(row.claim, row.exists, wait_s=0.3)) is None
    waited = time.monotonic() - started
    assert 0.3 <= waited < 1.5 and row.claims == 0
    assert 5 < row.looks < 40  # backing off from 1 ms to 50 ms, not spinning
