"""The default settings find a dead (killed or frozen) worker soon enough for a streaming client
to wait less than 10 s for its next token: with a 2 s heartbeat the dispatcher could take 8.5 s
to notice, and a worker fault's stall with the defaults was 8.5-12.7 s (docs/chaos.md)."""

from __future__ import annotations

from scheduler.dispatcher.loop import MAINTENANCE_S, PING_EVERY_S
from service.store.settings import DispatcherSettings, WorkerSettings

STALL_TARGET_S = 10.0
# What the rest of a failover takes after the dead worker is found: the re-queue, the next
# pass's claim and hand-off, the re-prefill from the checkpoint, the relay skipping the text
# the client has (2-3 s measured with `fairway chaos --default-timings`, half the target kept).
RERUN_BUDGET_S = STALL_TARGET_S / 2


def _default(group: type[WorkerSettings] | type[DispatcherSettings], name: str) -> float:
    return float(group.model_fields[name].default)


def test_a_dead_worker_is_found_within_half_the_stall_target() -> None:
    beat = _default(WorkerSettings, "heartbeat_seconds")
    after = _default(DispatcherSettings, "dead_worker_after_beats")
    # Silent for `after` beats behind the newest worker's beat, which is itself up to a beat
    # old, seen at the next maintenance tick.
    worst = after * beat + beat + MAINTENANCE_S
    assert worst <= STALL_TARGET_S - RERUN_BUDGET_S


def test_a_live_leader_pings_well_within_its_timeout() -> None:
    # The loop pings after each wait for wake-ups (at most a maintenance period long).
    timeout = _default(DispatcherSettings, "leader_timeout_seconds")
    assert timeout >= 4 * (PING_EVERY_S + MAINTENANCE_S)
