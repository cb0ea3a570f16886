"""The dispatcher's side of the express path: lending the policy's express tickets to the API
through Redis, and counting the ones taken until their jobs' NOTIFYs arrive.

Each model's tickets are one Redis list (``service.store.keys.express_key``) of
``<worker>|<ticket>`` entries; the API pops one per realtime job it places at insert
(service.jobs.express_handoff), and the job's NOTIFY names the ticket. A rewrite of the list reads
what was left in the same transaction, so the dispatcher knows which tickets were taken: those
hold room on their worker (``held``) until their job's NOTIFY is heard or, for a taker that
died before its insert, ``TAKEN_FORGET_S`` has passed. The lists expire on their own a few
seconds after the last rewrite, so a dispatcher that stops leading stops lending.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from redis import Redis

from scheduler.types import ExpressGrant
from service.store.keys import EXPRESS_LIST_TTL_MS, decode_ticket, encode_ticket, express_key

log = logging.getLogger("fairway.scheduler")

TAKEN_FORGET_S = 2.0  # a ticket taken and not heard of after this held no job
REWRITE_EVERY_S = 1.0  # lists are rewritten at least this often (they expire: keys.py)


class ExpressLender:
    def __init__(self, per_model: int) -> None:
        self.per_model = per_model
        self._lent: dict[str, list[str]] = {}  # model -> its list's entries as last written
        self._taken: dict[str, tuple[str, float]] = {}  # entry -> (worker, forget at)
        self._ids = itertools.count(1)
        self._next_rewrite = 0.0

    def held(self, now: float) -> dict[str, int]:
        """Tickets per worker that were taken and whose jobs were not heard of yet."""
        for entry, (_, forget_at) in list(self._taken.items()):
            if forget_at <= now:
                del self._taken[entry]
        return dict(Counter(worker for worker, _ in self._taken.values()))

    def heard(self, worker_id: str, ticket: str) -> None:
        """A placed job's NOTIFY: its ticket's room is the policy's to count from now on."""
        entry = encode_ticket(worker_id, ticket)
        self._taken.pop(entry, None)
        for entries in self._lent.values():
            if entry in entries:
                entries.remove(entry)

    def lend(self, redis: Redis, grants: Iterable[ExpressGrant], now: float) -> None:
        """Make Redis hold exactly ``grants`` (one grant per model at most): rewritten when
        they differ from what is lent, or every ``REWRITE_EVERY_S``."""
        wanted = {g.model: (g.worker_id, g.tickets) for g in grants if g.tickets > 0}
        lent = {model: (_worker_of(entries[0]), len(entries))
                for model, entries in self._lent.items() if entries}
        if wanted == lent and now < self._next_rewrite:
            return
        models = sorted(set(self._lent) | set(wanted))
        if not models:
            return
        fresh = {model: [encode_ticket(worker, str(next(self._ids))) for _ in range(count)]
                 for model, (worker, count) in wanted.items()}
        with redis.pipeline(transaction=True) as pipe:
            for model in models:
                key = express_key(model)
                pipe.lrange(key, 0, -1)
                pipe.delete(key)
                if fresh.get(model):
                    pipe.rpush(key, *fresh[model])
                    pipe.pexpire(key, EXPRESS_LIST_TTL_MS)
            replies: list[Any] = pipe.execute()
        self._note_taken(models, fresh, replies, now)
        self._lent = {model: entries for model, entries in fresh.items() if entries}
        self._next_rewrite = now + REWRITE_EVERY_S

    def _note_taken(self, models: list[str], fresh: dict[str, list[str]], replies: list[Any],
                    now: float) -> None:
        """What each list lost since it was written was taken by the API."""
        at = 0
        for model in models:
            left = {raw.decode() if isinstance(raw, bytes) else raw for raw in replies[at]}
            at += 2 + (2 if fresh.get(model) else 0)
            for entry in self._lent.get(model, ()):
                if entry not in left:
                    self._taken[entry] = (_worker_of(entry), now + TAKEN_FORGET_S)


def _worker_of(entry: str) -> str:
    parts = decode_ticket(entry)
    return parts[0] if parts else ""
