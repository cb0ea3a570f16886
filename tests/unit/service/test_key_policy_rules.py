"""A key's policy, pure: what it allows, whether it costs a quota call, and the checks the
admin API runs before storing one."""

from __future__ import annotations

import datetime as dt
import types

import pytest

from service.store.quota_limits import QuotaLimits
from service.tenants.key_policy import (
    NO_POLICY,
    KeyPolicy,
    above_tenant,
    clean_models,
    expired,
)


def test_no_policy_allows_every_model_and_costs_nothing():
    assert NO_POLICY.allows("anything") and not NO_POLICY.limited


def test_an_allow_list_allows_only_its_models():
    policy = KeyPolicy(allowed_models=("a", "b"))
    assert policy.allows("a") and not policy.allows("c") and not policy.limited


def test_limits_become_quota_limits_with_the_rest_off():
    policy = KeyPolicy.of(types.SimpleNamespace(
        requests_per_minute=5, tokens_per_minute=None, concurrent_requests=2,
        allowed_models=["m"]))
    assert policy.limited and policy.allowed_models == ("m",)
    assert policy.limits() == QuotaLimits(requests_per_minute=5, concurrent_requests=2)


def test_a_key_limit_above_its_tenants_is_named():
    tenant = QuotaLimits(requests_per_minute=10, tokens_per_minute=None)
    assert above_tenant({"requests_per_minute": 10}, tenant) is None
    assert above_tenant({"tokens_per_minute": 10**9}, tenant) is None  # tenant unlimited
    assert above_tenant({"requests_per_minute": 11}, tenant) == ("requests_per_minute", 11, 10)


def test_expiry_binds_to_the_instant():
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert not expired(None, now)
    assert expired(now, now) and not expired(now + dt.timedelta(microseconds=1), now)


def test_models_are_kept_once_in_order():
    assert clean_models(["b", "a", "b"]) == ["b", "a"]


@pytest.mark.parametrize("models", [[], [" "], ["x" * 257], ["a\nb"],
                                    [f"m{i}" for i in range(65)]])
def test_bad_allow_lists_are_refused(models: list[str]):
    with pytest.raises(ValueError):
        clean_models(models)
