"""The simulated engine's scheduler: one step's plan (continuous batching with a token budget,
chunked prefill), KV block accounting with prefix caching, and preemption by recompute,
including the priority preemption Fairway adds to vLLM (see `worker.engine.sim`).

`SimEngine` holds one `SimScheduler` and runs its steps: ``schedule`` plans a step, the engine
sleeps the step's time, ``apply`` advances what ran and hands each request whose whole context
is in KV to the engine's sampler (the callback it was built with).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.engine.base import EngineRequest, TokenDelta
from worker.engine.sim_kv import BlockPool

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64 finalizer: a cheap, well-spread 64-bit hash that is stable across runs."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


@dataclass(eq=False)
class SimRequest:
    """One request as the engine runs it: its context, KV blocks and what it has sent."""

    req: EngineRequest
    arrival: int
    queue: asyncio.Queue[TokenDelta]
    tokens: list[int]  # prompt + output: what must be in KV to sample the next token
    num_prompt: int
    num_computed: int = 0
    num_cached: int = 0
    blocks: list[int | None] = field(default_factory=list)  # hash for shared full blocks
    block_hashes: list[int] = field(default_factory=list)  # chained hash per full block
    num_published: int = 0  # leading blocks already offered to the prefix cache
    text: str = ""
    sent_text: int = 0
    sent_tokens: int = 0
    hash: int = 0  # rolling hash of `tokens`
    salt_root: int = 0  # the first block's parent hash: its cache namespace (cache_salt)
    decoder: Any = None
    finished: bool = False

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.num_prompt

    @property
    def key(self) -> tuple[int, int]:
        return (self.req.priority, self.arrival)


class SimScheduler:
    """The running and waiting requests, the KV block pool, the step's budgets and the
    preemption counters, with the scheduling rules over them."""

    def __init__(self, *, max_num_seqs: int, token_budget: int, block_size: int,
                 kv_blocks: int, enable_prefix_caching: bool, preempt_for_priority: bool,
                 preempt_priority_gap: int, sample: Callable[[SimRequest], None]) -> None:
        self.max_num_seqs = max_num_seqs
        self.token_budget = token_budget
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.preempt_for_priority = preempt_for_priority
        self.preempt_priority_gap = preempt_priority_gap
        # Samples a request's next token; it may finish the request (``remove``) at once.
        self._sample = sample
        self.pool = BlockPool(kv_blocks)
        self.waiting: list[tuple[int, int, SimRequest]] = []  # heap on (priority, arrival)
        self.running: list[SimRequest] = []  # admission order
        self.num_preemptions = 0  # all recompute preemptions
        self.num_priority_preemptions = 0  # those a waiting, better request caused

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def add(self, r: SimRequest) -> None:
        """A new request waits its turn."""
        heapq.heappush(self.waiting, (*r.key, r))

    def remove(self, r: SimRequest) -> None:
        """A finished or aborted request leaves its queue and frees its KV."""
        if r in self.running:
            self.running.remove(r)
        else:
            self.waiting = [w for w in self.waiting if w[2] is not r]
            heapq.heapify(self.waiting)
        self.pool.release(r.blocks)
        r.blocks = []

    def is_decode(self, r: SimRequest, n: int) -> bool:
        return n == 1 and r.num_output > 0 and r.num_computed == len(r.tokens) - 1

    def schedule(self) -> list[tuple[SimRequest, int]]:
        if self.preempt_for_priority:
            for victim in self._plan_priority_victims():
                self._preempt(victim)
                self.num_priority_preemptions += 1
        budget = self.token_budget
        scheduled: dict[SimRequest, int] = {}
        preempted = False
        for r in list(self.running):
            if budget == 0:
                break
            if r not in self.running:  # preempted below to make room for an earlier one
                continue
            n = min(len(r.tokens) - r.num_computed, budget)
            while not self._grow(r, n):
                victim = max(self.running, key=lambda x: x.key)
                self._preempt(victim)
                preempted = True
                budget += scheduled.pop(victim, 0)
                if victim is r:
                    break
            if r in self.running:
                scheduled[r] = n
                budget -= n
        if preempted:
            # Like vLLM: no admissions in a step that had to preempt (KV is the bottleneck).
            return list(scheduled.items())
        # Admit waiting requests in priority order; stop at the first that does not fit.
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0][2]
            self._match_prefix(r)
            n = min(len(r.tokens) - r.num_computed, budget)
            if not self._grow(r, n):
                self.pool.release(r.blocks)
                r.blocks, r.num_computed = [], 0
                break
            heapq.heappop(self.waiting)
            self.running.append(r)
            scheduled[r] = n
            budget -= n
        return list(scheduled.items())

    def _plan_priority_victims(self) -> list[SimRequest]:
        """Running requests to preempt so that better waiting ones are admitted this step.

        The rule of `worker.engine.vllm_preempt`: walk the waiting queue in priority order
        while a request beats the worst running one by the gap; for each, take victims
        worst-first (only ones at least the gap worse) until a slot and the blocks for its
        full context plus one token are free, after the running requests' growth this step.
        One that cannot fit even so stops the walk and costs nobody their KV.
        """
        gap = self.preempt_priority_gap
        if not self.running or not self.waiting:
            return []
        order = sorted(self.running, key=lambda x: x.key, reverse=True)
        if order[0].req.priority - self.waiting[0][0] < gap:
            return []
        # Replay the running half of schedule: what each running request takes this step.
        budget, growth = self.token_budget, {}
        for r in self.running:
            n = min(len(r.tokens) - r.num_computed, budget)
            budget -= n
            growth[r] = (n, max(0, self._blocks_for(r.num_computed + n) - len(r.blocks)))
        free_slots = self.max_num_seqs - len(self.running)
        free_blocks = self.pool.free - sum(b for _, b in growth.values())
        planned: list[SimRequest] = []
        for _, _, head in sorted(self.waiting, key=lambda w: w[:2]):
            if budget <= 0 or not order or order[0].req.priority - head.req.priority < gap:
                break
            cached, shared = self._prefix_hits(head)
            need = self._blocks_for(len(head.tokens) + 1) - shared
            extra: list[SimRequest] = []
            slots, blocks, tokens = free_slots, free_blocks, budget
            while (slots < 1 or blocks < need) and len(extra) < len(order):
                victim = order[len(extra)]
                if victim.req.priority - head.req.priority < gap:
                    break
                vt, vb = growth[victim]
                slots, blocks, tokens = slots + 1, blocks + vb + self._freed(victim), tokens + vt
                extra.append(victim)
            if slots < 1 or blocks < need:
                break
            planned += extra
            del order[: len(extra)]
            free_slots, free_blocks = slots - 1, blocks - need
            budget = tokens - (len(head.tokens) - cached)
        return planned

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _prefix_hits(self, r: SimRequest) -> tuple[int, int]:
        """(cached tokens, blocks among them held by a running request) -- no side effects."""
        if not self.enable_prefix_caching:
            return 0, 0
        self._hash_blocks(r, len(r.tokens))
        hits = shared = 0
        for h in r.block_hashes[: (len(r.tokens) - 1) // self.block_size]:
            if h in self.pool.refs:
                shared += 1  # in use: costs no free block
            elif h not in self.pool.evictable:
                break
            hits += 1
        return hits * self.block_size, shared

    def _freed(self, r: SimRequest) -> int:
        """Blocks that go back to the free pool when `r` releases its own."""
        return sum(1 for h in r.blocks if h is None or self.pool.refs.get(h) == 1)

    def _match_prefix(self, r: SimRequest) -> None:
        """Take cached full blocks of the context; at least one token is left to compute."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        self._hash_blocks(r, len(r.tokens))
        for h in r.block_hashes[: (len(r.tokens) - 1) // bs]:
            if not self.pool.touch(h):
                break
            r.blocks.append(h)
        r.num_computed = len(r.blocks) * bs
        if r.num_output == 0:
            r.num_cached = r.num_computed

    def _hash_blocks(self, r: SimRequest, upto: int) -> None:
        bs = self.block_size
        for i in range(len(r.block_hashes), upto // bs):
            parent = r.block_hashes[-1] if r.block_hashes else r.salt_root
            r.block_hashes.append(hash((parent, *r.tokens[i * bs : (i + 1) * bs])))

    def _grow(self, r: SimRequest, n: int) -> bool:
        need = -(-(r.num_computed + n) // self.block_size) - len(r.blocks)
        if need <= 0:
            return True
        if not self.pool.allocate(need):
            return False
        r.blocks.extend([None] * need)
        return True

    def _preempt(self, r: SimRequest) -> None:
        """Recompute preemption: free its KV, keep its output, back to the waiting queue."""
        self.running.remove(r)
        self.pool.release(r.blocks)
        r.blocks, r.num_computed, r.num_published = [], 0, 0
        heapq.heappush(self.waiting, (*r.key, r))
        self.num_preemptions += 1

    def apply(self, scheduled: list[tuple[SimRequest, int]]) -> None:
        for r, n in scheduled:
            if r.finished or r not in self.running:
                continue
            r.num_computed += n
            if self.enable_prefix_caching:
                self._publish_full_blocks(r)
            if r.num_computed < len(r.tokens):
                continue  # a prefill chunk; no token until the whole context is in KV
            self._sample(r)

    def _publish_full_blocks(self, r: SimRequest) -> None:
        self._hash_blocks(r, r.num_computed)
        full = r.num_computed // self.block_size
        for i in range(r.num_published, full):
            if r.blocks[i] is None and self.pool.publish(r.block_hashes[i]):
                r.blocks[i] = r.block_hashes[i]
        r.num_published = max(r.num_published, full)

