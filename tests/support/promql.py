"""Reading PromQL from dashboards and rules: every series selector it holds (metric name and
label matchers), parsed with a real PromQL parser (promql-parser), and what Fairway's
registry says each metric is (its sample names and label names)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import promql_parser
from prometheus_client import CollectorRegistry

from service.store.telemetry import state  # noqa: F401  (registers the SLO window gauges)
from service.store.telemetry.slo import SLO_WINDOW_LABELS

# Grafana's variables, replaced by something of the same type before parsing.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                "$tenant": ".*"}
# Labels Prometheus adds to every scraped series, and the ones a sample name's suffix brings.
TARGET_LABELS = frozenset({"job", "instance"})
SUFFIX_LABELS = {"_bucket": {"le"}}


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value)


def _op(op: Any) -> str:
    ops = ((promql_parser.MatchOp.Equal, "="), (promql_parser.MatchOp.NotEqual, "!="),
           (promql_parser.MatchOp.Re, "=~"), (promql_parser.MatchOp.NotRe, "!~"))
    return next(text for kind, text in ops if op == kind)  # MatchOp is not hashable


def _walk(node: Any, out: list[Selector]) -> None:
    if isinstance(node, promql_parser.VectorSelector):
        matchers = tuple((m.name, _op(m.op), m.value) for m in node.matchers.matchers)
        name = node.name or next((v for label, op, v in matchers
                                  if label == "__name__" and op == "="), "")
        out.append(Selector(name, tuple(m for m in matchers if m[0] != "__name__")))
    elif isinstance(node, promql_parser.MatrixSelector):
        _walk(node.vector_selector, out)
    elif isinstance(node, promql_parser.BinaryExpr):
        _walk(node.lhs, out)
        _walk(node.rhs, out)
    elif isinstance(node, promql_parser.Call):
        for arg in node.args:
            _walk(arg, out)
    elif isinstance(node, promql_parser.AggregateExpr):
        _walk(node.expr, out)
        if node.param is not None:
            _walk(node.param, out)
    elif isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr
                    | promql_parser.SubqueryExpr):
        _walk(node.expr, out)


def selectors(expr: str) -> list[Selector]:
    """Every series selector in ``expr`` (Grafana variables allowed)."""
    for var, value in sorted(GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    leftover = re.findall(r"\$\w+", expr)
    assert not leftover, f"unknown Grafana variable(s) {leftover} in {expr!r}"
    out: list[Selector] = []
    _walk(promql_parser.parse(expr), out)
    return out


def exported_labels(registry: CollectorRegistry) -> dict[str, frozenset[str]]:
    """Sample name -> the label names it carries, for every metric in ``registry``."""
    labels: dict[str, frozenset[str]] = {}
    for family in registry.collect():
        names = {family.name}
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count", "_created")}
        own = _label_names(registry, family.name)
        for name in names:
            extra = next((v for s, v in SUFFIX_LABELS.items() if name.endswith(s)), set())
            labels[name] = frozenset(own | extra)
    return labels


def _label_names(registry: CollectorRegistry, family: str) -> set[str]:
    """A family's declared label names (from the metric object, since a family that has no
    sample yet carries none)."""
    if family in SLO_WINDOW_LABELS:  # a custom collector: it declares them itself
        return set(SLO_WINDOW_LABELS[family])
    collector = getattr(registry, "_names_to_collectors", {}).get(family)
    declared = getattr(collector, "_labelnames", None)
    if declared is not None:
        return set(declared)
    return {k for f in registry.collect() if f.name == family for s in f.samples
            for k in s.labels}
