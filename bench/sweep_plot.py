"""PNG plots of a load sweep (bench/sched_sweep.py): one figure per trace, three panels
against realtime load, one line per policy, the targets dashed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

PANELS = [
    # (row key, y label, target, log scale)
    ("slo_accepted", "realtime SLO attainment, accepted (%)", 99.0, False),
    ("p99_vs_alone", "realtime p99 TTFT / alone", 1.1, True),
    ("left", "batch tok/s / capacity left (%)", 90.0, False),
]
PERCENT = {"slo_accepted", "left"}


def plot(rows: list[dict[str, Any]], out_dir: Path, name: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for ax, (key, label, target, log) in zip(axes, PANELS, strict=True):
        for policy in policies:
            mine = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["load"])
            xs = [100 * r["load"] for r in mine]
            ys = [_value(r, key) for r in mine]
            ax.plot(xs, ys, marker="o", label=policy)
            if key == "slo_accepted":  # of all requests, refusals counted as misses
                ax.plot(xs, [_value(r, "slo_all") for r in mine], linestyle=":",
                        color=ax.lines[-1].get_color(), label=f"{policy} (of all)")
        ax.axhline(target, color="grey", linestyle="--", linewidth=1)
        ax.axvline(90, color="grey", linestyle=":", linewidth=1)
        if log:
            ax.set_yscale("log")
        if key == "left":  # a policy that starves realtime (FCFS) runs far above: clip it
            ax.set_ylim(0, 200)
        ax.set_xlabel("realtime load (% of what the pool sustains alone)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="x-small")
    fig.suptitle(name)
    fig.tight_layout()
    path = out_dir / f"sweep-{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def _value(row: dict[str, Any], key: str) -> float:
    value = float(row[key])
    if math.isinf(value) or math.isnan(value):
        return math.nan  # nothing to draw (no first token at all, or no realtime left)
    return 100 * value if key in PERCENT else value
