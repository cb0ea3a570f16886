"""The admin API's request bodies refuse what no admin means: a quota that is not a whole
number at least 0 (a string, a float, a boolean, NaN), a null that would silently lift a
limit, a plan weight or SLO that is not a positive number, a blank key name, a key that has
already expired. Each refusal names the field (the API turns it into a 400 with `param`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pydantic import ValidationError

from service.admin.schemas import KeyCreate, QuotaUpdate, TierUpsert, quota_view

NOT_QUOTAS = ["abc", "1,000,000", "5", float("nan"), float("inf"), 1.5, 1.0, -1, True, None,
              [], {}]
TIER: dict[str, Any] = {
    "weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 400, "tpot_slo_ms": 60,
    "quotas": {"requests_per_minute": 10, "tokens_per_minute": "unlimited",
               "concurrent_requests": 2, "batch_enqueued_tokens": 0,
               "monthly_tokens": "unlimited"}}


def _refused(model: Any, body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    first = info.value.errors()[0]
    return ".".join(str(p) for p in first["loc"]), first["msg"]


@pytest.mark.parametrize("value", NOT_QUOTAS, ids=repr)
def test_a_quota_override_must_be_a_whole_number_or_unlimited(value: Any):
    loc, msg = _refused(QuotaUpdate, {"overrides": {"tokens_per_minute": value}})
    assert loc == "overrides.tokens_per_minute"
    assert "unlimited" in msg


def test_unlimited_is_explicit_and_left_out_inherits():
    doc = QuotaUpdate.model_validate({"overrides": {"requests_per_minute": 0,
                                                    "monthly_tokens": "unlimited"}})
    assert doc.overrides.stored() == {"requests_per_minute": 0, "monthly_tokens": None}
    assert QuotaUpdate.model_validate({"overrides": {}}).overrides.stored() == {}


def test_null_says_how_to_lift_a_limit():
    _, msg = _refused(QuotaUpdate, {"overrides": {"monthly_tokens": None}})
    assert '"unlimited"' in msg and "null" in msg


@pytest.mark.parametrize("value", [0, 101, 50.5, "80", None])
def test_the_alert_level_is_a_percentage(value: Any):
    loc, _ = _refused(QuotaUpdate, {"overrides": {"monthly_alert_percent": value}})
    assert loc == "overrides.monthly_alert_percent"


@pytest.mark.parametrize("value", NOT_QUOTAS, ids=repr)
def test_a_plan_quota_must_be_a_whole_number_or_unlimited(value: Any):
    loc, _ = _refused(TierUpsert, {**TIER, "quotas": {**TIER["quotas"], "concurrent_requests":
                                                      value}})
    assert loc == "quotas.concurrent_requests"


def test_a_plan_names_every_limit():
    quotas = dict(TIER["quotas"])
    del quotas["monthly_tokens"]  # was: left out, so silently unlimited
    loc, _ = _refused(TierUpsert, {**TIER, "quotas": quotas})
    assert loc == "quotas.monthly_tokens"
    stored = TierUpsert.model_validate(TIER).quotas.stored()
    assert stored["tokens_per_minute"] is None and stored["monthly_alert_percent"] == 80


@pytest.mark.parametrize(("field", "value"), [
    ("weight", 0), ("weight", -1), ("weight", "2"), ("weight", True), ("weight", float("nan")),
    ("weight", float("inf")), ("ttft_slo_ms", 0), ("ttft_slo_ms", -5), ("ttft_slo_ms", 1.5),
    ("ttft_slo_ms", "400"), ("tpot_slo_ms", None), ("tpot_slo_ms", 0)])
def test_plan_weights_and_slos_are_positive_numbers(field: str, value: Any):
    loc, _ = _refused(TierUpsert, {**TIER, field: value})
    assert loc == field


@pytest.mark.parametrize("name", ["", "   ", "a\nb", "x" * 129])
def test_a_key_name_is_a_readable_label(name: str):
    assert _refused(KeyCreate, {"name": name})[0] == "name"


def test_a_key_expiry_is_in_the_future():
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).isoformat()
    loc, msg = _refused(KeyCreate, {"expires_at": past})
    assert loc == "expires_at" and "future" in msg
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    assert KeyCreate.model_validate({"expires_at": soon.isoformat()}).expires_at == soon


def test_what_the_api_shows_can_be_written_back():
    shown = quota_view({"requests_per_minute": None, "monthly_tokens": 5,
                        "monthly_alert_percent": 80})
    assert shown == {"requests_per_minute": "unlimited", "monthly_tokens": 5,
                     "monthly_alert_percent": 80}
    assert QuotaUpdate.model_validate({"overrides": shown}).overrides.stored() == {
        "requests_per_minute": None, "monthly_tokens": 5, "monthly_alert_percent": 80}
