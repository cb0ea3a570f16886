"""The fairness report: weighted max-min fair shares, Jain's index over service / share."""

from __future__ import annotations

import pytest

from service.store.telemetry.fairness import (
    TenantService,
    class_fairness,
    fairness_by_class,
    jain,
    water_fill,
)


def svc(tenant: str, served: float, backlog: float = 0.0, weight: float = 1.0,
        job_class: str = "realtime") -> TenantService:
    return TenantService(tenant_id=tenant, tenant=tenant, job_class=job_class, weight=weight,
                         served=served, backlog=backlog, jobs=1, wait_p50_s=None,
                         wait_p99_s=None, oldest_wait_s=None)


def test_jain_is_one_for_equal_and_one_over_n_for_a_monopoly():
    assert jain([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) is None and jain([0.0, 0.0]) is None


def test_water_fill_gives_a_small_demand_what_it_asks_and_splits_the_rest_by_weight():
    shares = water_fill({"a": 10, "b": 100, "c": 100}, {"a": 1, "b": 1, "c": 3}, 110)
    assert shares["a"] == pytest.approx(10)
    assert shares["b"] == pytest.approx(25) and shares["c"] == pytest.approx(75)


def test_water_fill_never_gives_more_than_demand_or_capacity():
    shares = water_fill({"a": 5, "b": 5}, {"a": 1, "b": 1}, 100)
    assert shares == {"a": 5, "b": 5}
    assert sum(water_fill({"a": 50, "b": 80}, {"a": 2, "b": 1}, 60).values()) == pytest.approx(60)


def test_backlogged_tenants_served_by_weight_are_perfectly_fair():
    report = class_fairness("realtime", [svc("a", 300, backlog=1000, weight=3),
                                         svc("b", 100, backlog=1000, weight=1)])
    assert report.jain == pytest.approx(1.0)
    assert all(t.share_ratio == pytest.approx(1.0) for t in report.tenants)


def test_a_tenant_starved_while_backlogged_lowers_the_index_and_reads_below_one():
    report = class_fairness("realtime", [svc("hog", 900, backlog=1000),
                                         svc("starved", 100, backlog=1000)])
    assert report.jain is not None and report.jain < 0.7
    ratios = {t.service.tenant_id: t.share_ratio for t in report.tenants}
    assert ratios["starved"] == pytest.approx(0.2) and ratios["hog"] == pytest.approx(1.8)


def test_a_tenant_that_asked_for_little_is_not_counted_as_starved():
    # "light" wanted 10 and got 10; "heavy" took the rest of what was served: fair.
    report = class_fairness("batch", [svc("light", 10), svc("heavy", 990, backlog=5000)])
    assert report.jain == pytest.approx(1.0)


def test_classes_are_judged_apart_and_one_tenant_has_no_index():
    report = fairness_by_class([svc("a", 10, job_class="batch"), svc("a", 5), svc("b", 5)])
    assert report["batch"].jain is None
    assert report["realtime"].jain == pytest.approx(1.0)
