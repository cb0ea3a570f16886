"""Summaries, a plain-text table, and PNG plots (matplotlib, Agg backend) of sim results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from scheduler.sim.metrics import JobRecord, cumulative_service, jain, percentile
from scheduler.sim.runner import SimResult
from scheduler.types import JobClass


def _latency(records: list[JobRecord], default_slo: float, span_s: float) -> dict[str, float]:
    judged = [r for r in records if not r.pending(span_s)]
    done = [r for r in records if r.finished is not None]
    ttft = [r.ttft for r in done if r.ttft is not None]
    tpot = [t for t in (r.tpot for r in done) if t is not None]
    e2e = [r.e2e for r in done if r.e2e is not None]
    met = sum(1 for r in judged if r.met_slo(default_slo))
    return {
        "n": len(records),
        "done": len(done),
        "rejected": sum(1 for r in records if r.rejected),
        "ttft_p50": percentile(ttft, 50),
        "ttft_p99": percentile(ttft, 99),
        "tpot_p50": percentile(tpot, 50),
        "tpot_p99": percentile(tpot, 99),
        "e2e_p50": percentile(e2e, 50),
        "e2e_p99": percentile(e2e, 99),
        "slo_attainment": met / len(judged) if judged else math.nan,
        "goodput_rps": met / span_s if span_s > 0 else math.nan,
        "done_out_tok_s": sum(r.output for r in done) / span_s if span_s > 0 else math.nan,
    }


def summarize(result: SimResult, default_slo: float) -> dict[str, Any]:
    m = result.metrics
    records = list(m.records.values())
    span = result.end_s
    by_class = {
        c.value: _latency([r for r in records if r.job.job_class is c], default_slo, span)
        for c in JobClass
    }
    tenants = sorted({r.job.tenant for r in records})
    by_tenant = {
        t: _latency([r for r in records if r.job.tenant == t], default_slo, span) for t in tenants
    }
    served = {t: sum(m.service.get(t, {}).values()) for t in tenants}
    for t in tenants:  # tokens produced, finished or not: throughput while backlogged
        by_tenant[t]["out_tok_s"] = m.served_out.get(t, 0) / span if span > 0 else math.nan
    total_out = sum(m.served_out.values())
    everything = _latency(records, default_slo, span)
    everything["out_tok_s"] = total_out / span if span > 0 else math.nan
    for c in JobClass:
        owners = {r.job.tenant for r in records if r.job.job_class is c}
        by_class[c.value]["out_tok_s"] = (
            sum(m.served_out.get(t, 0) for t in owners) / span if span > 0 else math.nan
        )
    return {
        "scenario": result.scenario,
        "policy": result.policy,
        "all": everything,
        "class": by_class,
        "tenant": by_tenant,
        "weighted_service": served,
        "jain": jain(list(served.values())),
        "max_charged_gap": m.max_charged_gap,
        "max_request_cost": m.max_request_cost,
        "preemptions": m.preemptions,
        "engine_preemptions": m.engine_preemptions,
        "work_lost_tokens": m.work_lost_tokens,
        "preemption_mode": m.preemption_mode,
        "preemption_mode_used": "/".join(sorted(set(m.modes_used.values()))) or m.preemption_mode,
        "preemption_fallbacks": dict(m.mode_fallbacks),
        "recomputed_tokens": m.recomputed_tokens,
        "swapped_tokens": m.swapped_tokens,
        "swap_s": m.swap_s,
        "prefix_hit_tokens": m.prefix_hit_tokens,
        "busy_fraction": result.busy_fraction,
        "sim_end_s": result.end_s,
        "wall_s": result.wall_s,
        "decisions": m.decisions,
        "decisions_per_s": m.decisions / m.schedule_wall_s if m.schedule_wall_s else math.nan,
    }


def _f(value: float, digits: int = 2) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (f"{value:.{digits}f}")
    )


def _mode(s: dict[str, Any]) -> str:
    used = str(s["preemption_mode_used"])
    if s["preemption_mode"] != used:  # asked for swap, some workers cannot offload
        return f"{s['preemption_mode']}->{used}(fallback)"
    return used


def table(summaries: list[dict[str, Any]]) -> str:
    head = (
        f"{'policy':<14}{'group':<12}{'n':>7}{'rej':>6}{'ttft50':>8}{'ttft99':>8}"
        f"{'tpot50':>8}{'tpot99':>8}{'e2e50':>8}{'e2e99':>8}{'slo%':>7}{'tok/s':>9}"
    )
    lines = [head, "-" * len(head)]
    for s in summaries:
        groups = [("all", s["all"])]
        groups += [(f"cls:{k}", v) for k, v in s["class"].items() if v["n"]]
        groups += [(f"t:{k}", v) for k, v in s["tenant"].items()]
        for name, g in groups:
            lines.append(
                f"{s['policy']:<14}{name[:11]:<12}{g['n']:>7}{g['rejected']:>6}"
                f"{_f(g['ttft_p50']):>8}{_f(g['ttft_p99']):>8}{_f(g['tpot_p50'], 3):>8}"
                f"{_f(g['tpot_p99'], 3):>8}{_f(g['e2e_p50'], 1):>8}{_f(g['e2e_p99'], 1):>8}"
                f"{_f(100 * g['slo_attainment'], 1):>7}{_f(g['out_tok_s'], 1):>9}"
            )
        lines.append(
            f"{'':<14}jain={_f(s['jain'], 3)} busy={_f(100 * s['busy_fraction'], 1)}% "
            f"preempt={s['preemptions']}+{s['engine_preemptions']}(engine) "
            f"mode={_mode(s)} lost_tok={s['work_lost_tokens']} "
            f"recomp_tok={s['recomputed_tokens']} swap_tok={s['swapped_tokens']} "
            f"goodput={_f(s['all']['goodput_rps'], 3)}rps "
            f"sim={_f(s['sim_end_s'], 0)}s wall={_f(s['wall_s'], 1)}s"
        )
    return "\n".join(lines)


def plot(results: list[SimResult], out_dir: Path) -> list[Path]:
    """Service curves per tenant (one panel per policy) and realtime TTFT CDFs per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        series = cumulative_service(result.metrics, result.end_s)
        xs = [b * result.metrics.bin_s for b in range(len(next(iter(series.values()), [])))]
        for tenant, ys in sorted(series.items()):
            ax.plot(xs, ys, label=tenant)
        ax.set_title(f"{result.policy}: weighted service / weight")
        ax.set_xlabel("simulated s")
        ax.legend(fontsize="small")
    path = out_dir / f"{results[0].scenario}-service.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for result in results:
        ttft = sorted(
            r.ttft
            for r in result.metrics.records.values()
            if r.ttft is not None and r.job.job_class is JobClass.REALTIME
        )
        if ttft:
            ax.plot(ttft, [(i + 1) / len(ttft) for i in range(len(ttft))], label=result.policy)
    ax.set_xscale("log")
    ax.set_xlabel("realtime TTFT (s)")
    ax.set_ylabel("CDF")
    ax.legend()
    path = out_dir / f"{results[0].scenario}-ttft-cdf.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths
