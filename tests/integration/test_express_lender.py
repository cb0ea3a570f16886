"""The dispatcher's express lender (scheduler.dispatcher.express_lender) against real Redis: it
lends what the policy grants, reads back what the API took in the same transaction as its rewrite,
holds the taken tickets' room until their jobs are heard of (or forgotten), and its lists
expire by themselves."""

from __future__ import annotations

import uuid

import pytest
from redis import Redis

from scheduler.dispatcher.express_lender import TAKEN_FORGET_S, ExpressLender
from scheduler.types import ExpressGrant
from service.jobs.express_handoff import decode_ticket
from service.store.keys import EXPRESS_LIST_TTL_MS, express_key


@pytest.fixture
def redis(test_redis_url: str) -> Redis:
    return Redis.from_url(test_redis_url)


def _model() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


def _lent(redis: Redis, model: str) -> list[str]:
    return [raw.decode() for raw in redis.lrange(express_key(model), 0, -1)]


def test_it_lends_the_grants_and_their_lists_expire(redis: Redis) -> None:
    model = _model()
    ExpressLender(2).lend(redis, [ExpressGrant(model, "w1", 2)], now=0.0)
    tickets = [decode_ticket(t) for t in _lent(redis, model)]
    assert [t.worker_id for t in tickets if t] == ["w1", "w1"]
    assert len({t.ticket for t in tickets if t}) == 2
    assert 0 < redis.pttl(express_key(model)) <= EXPRESS_LIST_TTL_MS


def test_a_taken_ticket_holds_its_room_until_its_job_is_heard(redis: Redis) -> None:
    model, lender = _model(), ExpressLender(2)
    lender.lend(redis, [ExpressGrant(model, "w1", 2)], now=0.0)
    taken = decode_ticket(redis.lpop(express_key(model)))  # the API's take
    assert taken is not None
    assert lender.held(0.1) == {}  # not known yet: the list was not read since
    lender.lend(redis, [ExpressGrant(model, "w1", 1)], now=0.1)  # a changed grant: rewrite
    assert lender.held(0.1) == {"w1": 1}
    assert len(_lent(redis, model)) == 1
    lender.heard(taken.worker_id, taken.ticket)
    assert lender.held(0.2) == {}


def test_a_ticket_heard_before_the_rewrite_is_not_held(redis: Redis) -> None:
    model, lender = _model(), ExpressLender(2)
    lender.lend(redis, [ExpressGrant(model, "w1", 2)], now=0.0)
    taken = decode_ticket(redis.lpop(express_key(model)))
    assert taken is not None
    lender.heard(taken.worker_id, taken.ticket)
    lender.lend(redis, [ExpressGrant(model, "w1", 2)], now=0.1)  # refilled: one was used
    assert lender.held(0.1) == {} and len(_lent(redis, model)) == 2


def test_a_taken_ticket_never_heard_of_is_forgotten(redis: Redis) -> None:
    model, lender = _model(), ExpressLender(2)
    lender.lend(redis, [ExpressGrant(model, "w1", 1)], now=0.0)
    redis.lpop(express_key(model))  # a taker that died before its insert
    lender.lend(redis, [], now=0.5)
    assert lender.held(0.5) == {"w1": 1}
    assert lender.held(0.5 + TAKEN_FORGET_S) == {}


def test_it_writes_only_when_the_grant_changes_or_the_refresh_is_due(redis: Redis) -> None:
    model, lender = _model(), ExpressLender(2)
    lender.lend(redis, [ExpressGrant(model, "w1", 2)], now=0.0)
    first = _lent(redis, model)
    lender.lend(redis, [ExpressGrant(model, "w1", 2)], now=0.5)
    assert _lent(redis, model) == first  # unchanged: no write
    lender.lend(redis, [ExpressGrant(model, "w2", 2)], now=0.6)
    assert [t.split("|")[0] for t in _lent(redis, model)] == ["w2", "w2"]
    lender.lend(redis, [], now=0.7)  # the model's queue filled: nothing lent
    assert redis.exists(express_key(model)) == 0
