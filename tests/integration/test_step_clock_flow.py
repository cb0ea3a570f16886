"""Engine step clocks, worker -> Redis -> dispatcher -> policy (realtime placement by earliest
start, scheduler/policies/rt_start.py), against real Redis and a real worker (sim engine)."""

from __future__ import annotations

import time

import openai
from redis import Redis

from scheduler.dispatcher.loop import Dispatcher
from scheduler.policies import FairwayPolicy
from service.store.heartbeats import decode_step_clock, encode_step_clock
from service.store.keys import step_clock_key
from service.store.settings import Settings
from tests.support.stack import Stack, wait_until


class RecordingPolicy(FairwayPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[str, tuple[float | None, float]] = {}

    def on_worker_step(self, worker_id: str, started_at: float | None, step_s: float) -> None:
        self.steps[worker_id] = (started_at, step_s)
        super().on_worker_step(worker_id, started_at, step_s)


def test_worker_publishes_its_step_clock_while_busy_and_idle_after(sim_stack: Stack,
                                                                    make_tenant):
    _, key = make_tenant()
    redis = Redis.from_url(sim_stack.redis_url)
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0)
    seen: list[tuple[float | None, float]] = []
    stream = api.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "count slowly"}],
        max_tokens=64, stream=True)
    for _ in stream:
        clock = decode_step_clock(redis.get(step_clock_key("sim-1")))
        if clock is not None and clock[0] is not None:
            seen.append(clock)
    assert seen, "no busy step clock was published while the job streamed"
    started, step = seen[-1]
    assert started is not None and time.time() - 60 < started <= time.time()
    assert 0 < step < 5
    wait_until(lambda: decode_step_clock(redis.get(step_clock_key("sim-1"))) == (None, 0.0),
               10, "the idle clock after the job", sim_stack)


def test_dispatcher_feeds_published_clocks_to_the_policy(settings: Settings):
    redis = Redis.from_url(settings.redis_url)
    policy = RecordingPolicy()
    dispatcher = Dispatcher(settings, policy)
    dispatcher.workers = {"clock-a", "clock-b", "clock-c", "clock-d"}
    redis.set(step_clock_key("clock-a"), encode_step_clock((100.5, 0.025)), ex=30)
    redis.set(step_clock_key("clock-b"), encode_step_clock((None, 0.0)), ex=30)
    redis.set(step_clock_key("clock-c"), "garbage", ex=30)  # unreadable: not fatal
    try:
        dispatcher._refresh_step_clocks()
    finally:
        redis.delete(*(step_clock_key(w) for w in ("clock-a", "clock-b", "clock-c")))
    # Unreadable (c) or gone (d): unknown, i.e. no stale phase is kept.
    assert policy.steps == {"clock-a": (100.5, 0.025), "clock-b": (None, 0.0),
                            "clock-c": (None, 0.0), "clock-d": (None, 0.0)}
