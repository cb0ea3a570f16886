import pytest

from scheduler import tiers
from scheduler.policies.config import FairwayConfig
from scheduler.tiers import BATCH_LINE, TierRule, tier_rule
from scheduler.types import JobClass


@pytest.mark.parametrize(
    ("service_tier", "rule"),
    [
        ("priority", TierRule(JobClass.REALTIME, 0, "priority")),
        ("default", TierRule(JobClass.REALTIME, 1, "default")),
        ("auto", TierRule(JobClass.REALTIME, 1, "default")),
        (None, TierRule(JobClass.REALTIME, 1, "default")),
        ("flex", TierRule(JobClass.BATCH, 2, "flex")),
    ],
)
def test_tier_rule(service_tier, rule):
    assert tier_rule(service_tier) == rule


def test_batch_file_lines_are_batch_class_and_run_last():
    assert (BATCH_LINE.job_class, BATCH_LINE.priority, BATCH_LINE.echoed) == (
        JobClass.BATCH, 3, None
    )
    assert all(BATCH_LINE.priority > tier_rule(t).priority for t in ("priority", "default", "flex"))


def test_unknown_tier_is_refused():
    with pytest.raises(ValueError, match="scale"):
        tier_rule("scale")


def test_batch_class_starts_at_flex():
    # The engine's realtime guard splits the classes by priority alone: it relies on this.
    for service_tier in ("priority", "default", "flex"):
        rule = tier_rule(service_tier)
        assert (rule.job_class is JobClass.BATCH) == (rule.priority >= tiers.FLEX_TIER)


def test_policy_defaults_follow_the_table():
    config = FairwayConfig()
    assert config.flex_priority == tier_rule("flex").priority
    assert set(config.default_ttft_slo_s) == {
        tier_rule(t).priority for t in ("priority", "default", "flex")
    }


def test_the_names_are_the_rules_tiers():
    # The Literals the API's schemas list are stated beside the rules: they must agree.
    assert set(tiers.TIER_NAMES) == set(tiers._RULES)
    assert set(tiers.SERVICE_TIERS) == {"auto", *tiers.TIER_NAMES}
    assert [tier_rule(t).priority for t in tiers.TIER_NAMES] == sorted(
        tier_rule(t).priority for t in tiers.TIER_NAMES)
