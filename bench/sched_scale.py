"""Scale: policy decisions per second with a deep queue, many tenants and workers; memory;
and simulated-time speed for a large cluster.

    python bench/sched_scale.py            # 100k queued, 1k tenants, 100 workers; 100 GPUs x 5 min
    python bench/sched_scale.py --full     # 1M queued, 10k tenants, 1k workers; 1k GPUs x 1 h

Targets: >= 10k decisions/s at full size; 1 h of 1k GPUs faster than real time.
"""

from __future__ import annotations

import argparse
import random
import resource
import time

from sched_common import ratio

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario, WorkerGroup
from scheduler.types import Assign, JobClass, JobView, WorkerView


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def decision_rate(queued: int, tenants: int, workers: int, rounds: int) -> None:
    rng = random.Random(1)
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    for w in range(workers):
        policy.on_worker_heartbeat(WorkerView(f"w{w}", ("m",), 256, 0, 10**7, 0, 0.0))
    before = rss_mib()
    t0 = time.perf_counter()
    for i in range(queued):
        is_rt = i % 10 == 0
        policy.on_job_arrived(
            JobView(
                f"j{i}",
                f"t{rng.randrange(tenants)}",
                JobClass.REALTIME if is_rt else JobClass.BATCH,
                1 if is_rt else 3,
                "m",
                i * 1e-6,
                None if is_rt else 86400.0,
                rng.randint(50, 2000),
                rng.randint(16, 512),
                tenant_weight=rng.choice((1.0, 2.0, 4.0)),
                ttft_slo_s=1e6,
            )
        )
    enqueue_s = time.perf_counter() - t0
    print(
        f"enqueue {queued} jobs ({tenants} tenants): {enqueue_s:.1f} s "
        f"({queued / enqueue_s:,.0f}/s); RSS +{rss_mib() - before:,.0f} MiB "
        f"(max RSS {rss_mib():,.0f} MiB)"
    )
    placed: list[tuple[str, str]] = []
    decided = 0
    spent = 0.0
    now = 1.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        decisions = policy.schedule(now)
        spent += time.perf_counter() - t0
        decided += len(decisions)
        placed += [(d.job_id, d.worker_id) for d in decisions if isinstance(d, Assign)]
        rng.shuffle(placed)  # finish a random half: the slots refill next round
        for job_id, worker_id in placed[: len(placed) // 2]:
            policy.on_job_finished(job_id, worker_id, 0, 0)
        placed = placed[len(placed) // 2 :]
        now += 0.1
    print(
        f"schedule: {decided:,} decisions in {spent:.2f} s of policy time = "
        f"{ratio(decided, spent):,.0f} decisions/s ({workers} workers x 256 slots, "
        f"{policy.num_queued():,} still queued)"
    )


def sim_speed(gpus: int, duration: float) -> None:
    per_gpu_rt, per_gpu_batch = 2.0, 0.5  # requests/s per GPU
    scenario = Scenario.from_dict(
        {
            "name": "scale",
            "duration_s": duration,
            "model": "llama3-8b",
            "seed": 5,
            "workers": [{"count": gpus, "profile": "h200-llama3-8b"}],
            "tenants": {f"t{i}": float(1 + i % 3) for i in range(100)},
            "traffic": [
                {
                    "kind": "poisson",
                    "tenant": f"t{i}",
                    "rate": gpus * per_gpu_rt / 50,
                    "max_tokens": 256,
                    "prompt": {"dist": "lognormal", "median": 600, "sigma": 0.7, "max": 8192},
                    "output": {"dist": "lognormal", "median": 120, "sigma": 0.7, "max": 256},
                    "prefix": {"key": f"sys-{i % 10}", "tokens": 300},
                }
                for i in range(50)
            ]
            + [
                {
                    "kind": "poisson",
                    "class": "batch",
                    "tenant": f"t{50 + i}",
                    "window_s": 86400,
                    "rate": gpus * per_gpu_batch / 50,
                    "max_tokens": 512,
                    "prompt": {"dist": "lognormal", "median": 800, "sigma": 0.9, "max": 16384},
                    "output": {"dist": "pareto", "scale": 80, "alpha": 1.5, "max": 512},
                }
                for i in range(50)
            ],
            "default_ttft_slo_s": 1.0,
            "heartbeat_progress": False,
        }
    )
    scenario.workers = [WorkerGroup(gpus, "h200-llama3-8b", ("llama3-8b",))]
    t0 = time.perf_counter()
    result = run_variant(scenario, "fairway")
    wall = time.perf_counter() - t0
    m = result.metrics
    print(
        f"simulate {gpus} GPUs x {duration:.0f} s: {len(m.records):,} jobs, "
        f"{m.decisions:,} decisions, wall {wall:.1f} s = {duration / wall:.2f}x real time; "
        f"busy {100 * result.busy_fraction:.0f}%; max RSS {rss_mib():,.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--skip-sim", action="store_true")
    args = parser.parse_args()
    if args.full:
        decision_rate(1_000_000, 10_000, 1_000, rounds=20)
    else:
        decision_rate(100_000, 1_000, 100, rounds=20)
    if not args.skip_sim:
        sim_speed(1000, 3600.0) if args.full else sim_speed(100, 300.0)


if __name__ == "__main__":
    main()
