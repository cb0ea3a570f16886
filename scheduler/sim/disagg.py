"""Prefill/decode disaggregation in the simulator: a what-if, not a mode of the service.

The pool's first ``prefill_workers`` engines only prefill, the other ``decode_workers`` only
decode (``Scenario.disaggregation``, ``scheduler.sim.kv_transfer.Disaggregation``), as in
Splitwise (Patel et al., ISCA 2024) and DistServe (Zhong et al., OSDI 2024):

- The policy sees and places on the prefill workers only, each job as its prefill (its
  ``max_tokens`` is 1: the prefill reserves its prompt's KV and samples the first token).
  A request's first token comes at the end of its prefill; a one-token request ends there.
- Its KV then stays on the prefill worker (counted in that engine's KV, so a backed-up decode
  side holds prefill back, as DistServe's pull model does) until a decode worker has room
  for it: a slot and ``prompt + max_tokens`` of KV, reserved when the transfer starts.
  Requests wait for that in one queue, realtime first, then in order of prefill end (FCFS).
  The decode worker with the most free KV takes the head of the queue.
- The transfer takes ``transfer_s(prompt)``; a link carries one transfer at a time, both the
  sender's and the receiver's (a transfer starts when both are free). It starts after the
  prefill ends: no layer-by-layer overlap with the prefill (Splitwise overlaps it), the
  conservative end for disaggregation.
- The decode worker runs the request's remaining ``output - 1`` tokens in continuous
  batches (``EngineModel``, the same step cost model, never a prefill chunk). Its second
  token comes at the end of its first decode step there: TPOT = (last token - first token) /
  (output - 1) includes the transfer and the wait for a decode slot.

Decode workers never preempt (what they admit was reserved) and report nothing to the policy.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from scheduler.sim.engine_model import EngineModel
from scheduler.sim.runner import SimResult, Simulation
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq
from scheduler.sim.traffic import SimJob
from scheduler.types import JobClass, JobView

TRANSFER, DECODE_STEP = 10, 11


@dataclass(slots=True)
class Handoff:
    """A request between its prefill and its decode worker."""

    job: SimJob
    source: str  # the prefill worker holding its KV
    tokens: int  # KV tokens to move: the prompt
    kv_need: int  # what the decode worker reserves: prompt + max_tokens
    ready: float  # prefill end
    dest: str | None = None
    start: float | None = None  # transfer start
    end: float | None = None  # KV usable on dest


class DisaggSimulation(Simulation):
    def __init__(self, scenario: Scenario, variant: str, jobs: list[SimJob] | None = None):
        super().__init__(scenario, variant, jobs)
        split = self.scenario.split()
        if split is None:
            raise ValueError("DisaggSimulation needs a scenario with disaggregation")
        self.split = split
        ids = list(self.engines)
        self.decoders: dict[str, EngineModel] = {}
        for worker_id in ids[split.prefill_workers:]:
            cost = self.engines.pop(worker_id).cost
            del self.models[worker_id]
            self.metrics.modes_used.pop(worker_id, None)
            self.metrics.mode_fallbacks.pop(worker_id, None)
            if split.decode_max_slots is not None:
                cost = replace(cost, max_slots=split.decode_max_slots)
            self.decoders[worker_id] = EngineModel(cost, priority=True, preempt_for_realtime=False)
        # Decode room promised: admitted, waiting, or arriving by transfer (slots, KV tokens).
        self._committed: dict[str, list[int]] = {w: [0, 0] for w in self.decoders}
        self._link_free: dict[str, float] = dict.fromkeys(ids, 0.0)
        self._queue: list[tuple[bool, float, int, str]] = []  # (batch?, ready, n, job id)
        self.handoffs: dict[str, Handoff] = {}  # every request that went to a decode worker
        self._pending = 0  # handoffs whose decode has not finished

    # -- the policy's side: prefill only -------------------------------------------------

    def _job_view(self, job: SimJob, done: int) -> JobView:
        return replace(super()._job_view(job, done), max_tokens=1)

    def _seq_for(self, job: SimJob, done: int) -> Seq:
        seq = super()._seq_for(job, done)
        seq.target = min(seq.target, 1)  # the prefill samples the first token, then hands off
        seq.kv_need = seq.prompt + 1
        return seq

    def _finished(self, worker_id: str, seq: Seq, at: float) -> None:
        job = self.by_id[seq.job_id]
        if self._done_before.get(job.job_id, 0) + seq.total_output >= job.output_tokens:
            super()._finished(worker_id, seq, at)  # nothing to decode
            return
        del self._where[job.job_id]
        self.policy.on_job_finished(job.job_id, worker_id, seq.prompt, seq.total_output)
        kv_need = job.prompt_tokens + job.max_tokens
        if all(kv_need > e.cost.kv_capacity_tokens for e in self.decoders.values()):
            self.metrics.records[job.job_id].rejected = "no_decode_capacity"
            return
        self.engines[worker_id].kv_used += seq.prompt  # its KV stays until it is moved
        self.handoffs[job.job_id] = Handoff(job, worker_id, seq.prompt, kv_need, at)
        self._pending += 1
        self._seq += 1
        heapq.heappush(self._queue, (job.job_class is not JobClass.REALTIME, at, self._seq,
                                     job.job_id))
        self._dispatch()

    # -- KV transfers --------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Start transfers for the head of the decode queue while a decode worker has room."""
        while self._queue:
            handoff = self.handoffs[self._queue[0][3]]
            dest = self._pick_decoder(handoff.kv_need)
            if dest is None:
                return  # FCFS: the head waits for room, and everything behind it
            heapq.heappop(self._queue)
            committed = self._committed[dest]
            committed[0] += 1
            committed[1] += handoff.kv_need
            start = max(self.now, self._link_free[handoff.source], self._link_free[dest])
            self._link_free[handoff.source] = self._link_free[dest] = (
                start + self.split.wire_s(handoff.tokens)
            )
            handoff.dest, handoff.start = dest, start
            handoff.end = start + self.split.transfer_s(handoff.tokens)
            self._push(handoff.end, TRANSFER, handoff.job.job_id)

    def _pick_decoder(self, kv_need: int) -> str | None:
        best: tuple[int, int, str] | None = None
        for worker_id, engine in self.decoders.items():
            n, kv = self._committed[worker_id]
            free = engine.cost.kv_capacity_tokens - kv
            if n < engine.cost.max_slots and kv_need <= free:
                key = (-free, n, worker_id)
                if best is None or key < best:
                    best = key
        return None if best is None else best[2]

    def _event(self, kind: int, arg: str, epoch: int) -> None:
        if kind == TRANSFER:
            self._transferred(arg)
        elif kind == DECODE_STEP:
            self._decode_step(arg, epoch)
        else:
            super()._event(kind, arg, epoch)

    def _transferred(self, job_id: str) -> None:
        handoff = self.handoffs[job_id]
        assert handoff.dest is not None
        source = self.engines[handoff.source]
        source.kv_used -= handoff.tokens  # its room on the prefill worker is free again
        self._start(handoff.source)
        self.policy.on_worker_heartbeat(self._view(handoff.source))
        self._wake()
        job = handoff.job
        seq = Seq(job.job_id, job.tenant, job.job_class is JobClass.REALTIME, job.arrival,
                  handoff.tokens, job.output_tokens, handoff.kv_need,
                  prefilled=handoff.tokens, generated=1, first_token=True)
        if self.decoders[handoff.dest].add(seq, self.now):
            self._start_decoder(handoff.dest)

    # -- decode workers ------------------------------------------------------------------

    def _start_decoder(self, worker_id: str) -> None:
        engine = self.decoders[worker_id]
        end = engine.step_end if engine.step_end is not None else engine.start(self.now)
        if end is not None:
            self._push(end, DECODE_STEP, worker_id, engine.epoch)

    def _decode_step(self, worker_id: str, epoch: int) -> None:
        engine = self.decoders[worker_id]
        if engine.step_end is None or engine.epoch != epoch:
            return  # a cut replaced this step end
        result = engine.finish_step()
        m = self.metrics
        for tenant, tokens_in, tokens_out in result.served:
            weight = self.scenario.tenants.get(tenant, 1.0)
            m.add_service(tenant, weight, tokens_in, tokens_out, result.start, result.end)
        for seq in result.finished:
            record = m.records[seq.job_id]
            record.finished = result.end
            record.output = seq.total_output
            m.tokens_out[record.job.job_class] += record.output
            self._correct_charge(record.job, seq)
            committed = self._committed[worker_id]
            committed[0] -= 1
            committed[1] -= seq.kv_need
            self._pending -= 1
        self._start_decoder(worker_id)
        if result.finished:
            self._dispatch()

    # -- the run -------------------------------------------------------------------------

    def _busy(self) -> bool:
        return super()._busy() or self._pending > 0

    def run(self) -> SimResult:
        result = super().run()
        busy = sum(e.busy_s for e in self.engines.values())
        busy += sum(e.busy_s for e in self.decoders.values())
        span = max(self.now, 1e-9) * self.split.workers
        result.busy_fraction = min(1.0, busy / span)
        result.num_workers = self.split.workers
        return result
