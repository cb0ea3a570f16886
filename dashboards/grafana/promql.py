"""PromQL pieces shared by the Grafana dashboards (generate.py) and the alert rules
(alerts.py), so a panel and the alert about the same thing ask the same question."""

from __future__ import annotations

# Each target of a plan (slo_rules kinds ttft, tpot; deadline for batch class) should be met
# by this share of requests. The attainment panels draw it; the burn-rate alerts spend the
# rest (1 - objective) as the error budget.
SLO_OBJECTIVE = 0.99

W = "$__rate_interval"


def q(quantile: float, metric: str, by: str = "", where: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return (f"histogram_quantile({quantile}, sum by ({group}) "
            f"(rate({metric}_bucket{{{where}}}[{W}])))")


def ratio(num: str, den: str, by: str) -> str:
    return f"sum by ({by}) ({num}) / sum by ({by}) ({den})"


def attainment(kind: str, window: str, by: str = "", where: str = "") -> str:
    """Share of judged requests that met ``kind`` (fairway_slo_requests_total, one kind at a
    time: each request is counted once per kind it is judged on)."""
    sel = f'kind="{kind}"' + (f",{where}" if where else "")
    num = f'rate(fairway_slo_requests_total{{{sel},outcome="met"}}[{window}])'
    den = f"rate(fairway_slo_requests_total{{{sel}}}[{window}])"
    if by:
        return ratio(num, den, by)
    return f"sum({num}) / sum({den})"


def miss_ratio(sel: str, window: str, by: str) -> str:
    """Share of the requests ``sel`` picks (e.g. 'kind="ttft"') that missed."""
    return ratio(f'rate(fairway_slo_requests_total{{{sel},outcome="missed"}}[{window}])',
                 f"rate(fairway_slo_requests_total{{{sel}}}[{window}])", by)


def on_leader(expr: str) -> str:
    """Only the leading dispatcher refreshes its Postgres gauges; a standby's (or a former
    leader's) would be stale, so keep the series of the instance that leads now."""
    return f"({expr} and on (instance) (fairway_scheduler_leader == 1))"


def target(kind: str) -> str:
    """The plans' targets (from the plans table, exported by the dispatcher), one line each."""
    return f'max by (tenant_tier) (fairway_slo_target_seconds{{kind="{kind}"}})'
