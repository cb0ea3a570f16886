"""`fairway bench replay TRACE`: the command (options, tenants through the admin API, the
targets one after the other, the side-by-side table)."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from service.cli.errors import CLIError
from service.cli.replay.load import Outcomes, Target, replay, warm_up
from service.cli.replay.plan import DEFAULT_MIX, Plan, build_plan
from service.cli.replay.report import batch_rows, markdown, realtime_rows
from service.cli.target import AdminClient, api_root

TARGETS = ("fairway", "vllm-fcfs", "vllm-priority")


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks against a running stack").add_subparsers(
        dest="sub", required=True, metavar="{replay}")
    p = bench.add_parser("replay", help="replay a public trace as many tenants (realtime "
                                        "tiers and batch files), against Fairway and bare vLLM")
    p.add_argument("trace", help="Azure or BurstGPT CSV, or Mooncake-style JSONL "
                                 "(docs/traces.md)")
    p.add_argument("--format", default="auto", choices=["auto", "azure", "burstgpt", "jsonl"],
                   help="the trace's format")
    p.add_argument("--time-unit", default=None, choices=["s", "ms", "us"],
                   help="numeric timestamps' unit (default: the format's)")
    p.add_argument("--window", type=_window, default="0,60",
                   help="START,END: the trace seconds to replay")
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="arrival rate multiplier (trace time is divided by it)")
    p.add_argument("--max-prompt", type=int, default=256, help="prompt length cap (tokens)")
    p.add_argument("--max-output", type=int, default=64, help="output length cap (tokens)")
    p.add_argument("--mix", default=None,
                   help="JSON list of mix entries, or a file holding one (default: "
                        f"{json.dumps(list(DEFAULT_MIX))})")
    p.add_argument("--batch-every", type=float, default=30.0,
                   help="a batch tenant submits one file per this many replay seconds")
    p.add_argument("--seed", type=int, default=0, help="the mapping's seed")
    p.add_argument("--drain", type=float, default=120.0,
                   help="seconds past the last arrival to wait for what is still running")
    p.add_argument("--targets", default="fairway",
                   help=f"comma-separated, run in this order: {', '.join(TARGETS)}")
    p.add_argument("--model", default=None,
                   help="the model to ask for (default: the first of Fairway's /v1/models, "
                        "else the engine's served name)")
    p.add_argument("--vllm-url", default=None,
                   help="a bare vLLM server already running (its root URL) for one vllm-* "
                        "target; default: start one per target with the worker's settings")
    p.add_argument("--vllm-model-dir", type=Path, default=None,
                   help="the model folder bare vLLM loads (default: `fairway model`'s)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here too")
    p.set_defaults(func=cmd_replay)


def _window(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not START,END seconds: {text!r}") from None
    if not 0 <= lo < hi:
        raise argparse.ArgumentTypeError("needs 0 <= START < END")
    return lo, hi


def read_mix(text: str | None) -> list[dict[str, Any]]:
    if text is None:
        return [dict(e) for e in DEFAULT_MIX]
    path = Path(text).expanduser()
    raw = path.read_text() if not text.lstrip().startswith("[") and path.is_file() else text
    try:
        mix = json.loads(raw)
    except ValueError as exc:
        raise CLIError(f"--mix is neither a JSON list nor a file holding one: {exc}") from None
    if not isinstance(mix, list) or not all(isinstance(e, dict) for e in mix):
        raise CLIError("--mix must be a JSON list of objects")
    return mix


def make_plan(args: argparse.Namespace) -> Plan:
    from scheduler.sim.trace import load_trace

    try:
        trace = load_trace(args.trace, args.format, args.time_unit)
        plan = build_plan(trace, read_mix(args.mix), window=args.window,
                          rate_scale=args.rate_scale, max_prompt=args.max_prompt,
                          max_output=args.max_output, batch_every_s=args.batch_every,
                          seed=args.seed)
    except (OSError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    if not plan.realtime and not plan.batches:
        raise CLIError(f"no request of the trace falls in the window {args.window}")
    return plan


def tenant_keys(admin: AdminClient, plan: Plan) -> dict[str, str]:
    """A fresh key for each of the plan's tenants, creating those that do not exist (with
    their mix's plan) through the admin API."""
    wanted = {r.entry.tenant: r.entry.tenant_plan for r in plan.realtime}
    wanted.update({b.tenant: b.lines[0].entry.tenant_plan for b in plan.batches})
    existing = {t["name"]: t for t in admin.call("GET", "/admin/tenants")["data"]}
    keys = {}
    for name, tenant_plan in sorted(wanted.items()):
        if name in existing:
            if existing[name]["tier"] != tenant_plan:
                print(f"note: tenant {name} exists with plan {existing[name]['tier']}, "
                      f"not {tenant_plan}; its own plan applies")
            got = admin.call("POST", f"/admin/tenants/{existing[name]['id']}/keys",
                             json={"name": "replay"})
            keys[name] = got["key"]
        else:
            keys[name] = admin.call("POST", "/admin/tenants",
                                    json={"name": name, "tier": tenant_plan})["key"]["key"]
    return keys


def plan_targets(admin: AdminClient | None) -> dict[str, float]:
    """Each tenant plan's TTFT target (s): the stack's, else the fresh-install defaults."""
    if admin is not None:
        return {t["name"]: t["ttft_slo_ms"] / 1000
                for t in admin.call("GET", "/admin/tiers")["data"]}
    from service.plans.defaults import DEFAULT_PLANS

    return {t["name"]: t["ttft_slo_ms"] / 1000 for t in DEFAULT_PLANS}


def run_target(name: str, plan: Plan, args: argparse.Namespace, model: str,
               keys: dict[str, str]) -> Outcomes:
    if name == "fairway":
        target = Target(name, api_root(args), model, keys)
        return _run(target, plan, args.drain)
    priority = name == "vllm-priority"
    if args.vllm_url:
        return _run(Target(name, args.vllm_url.rstrip("/"), model, fairway=False,
                           priority=priority), plan, args.drain)
    from service.cli.replay.vllm_baseline import bare_vllm
    from worker.model_prep import ensure_default_model

    model_dir = args.vllm_model_dir or ensure_default_model()
    log = Path(tempfile.mkstemp(prefix=f"fairway-replay-{name}-", suffix=".log")[1])
    print(f"starting bare vLLM ({name}), log {log}", flush=True)
    with bare_vllm(model_dir, model, "priority" if priority else "fcfs", log) as base:
        return _run(Target(name, base, model, fairway=False, priority=priority), plan,
                    args.drain)


def _run(target: Target, plan: Plan, drain: float) -> Outcomes:
    warm_up(target)
    print(f"replaying on {target.name}: {len(plan.realtime)} realtime requests, "
          f"{len(plan.batches)} batch files over {plan.duration_s:.1f} s", flush=True)
    out = asyncio.run(replay(plan, target, drain_s=drain))
    failed = [o for o in out.realtime if o.status not in ("ok", "refused")]
    failed_batches = [b for b in out.batches if b.status != "completed"]
    if failed or failed_batches:
        first = (failed[0].status, failed[0].error) if failed else (
            failed_batches[0].status, failed_batches[0].error)
        print(f"{target.name}: {len(failed)} realtime request(s) failed or unfinished, "
              f"{len(failed_batches)} batch file(s) not completed; first: {first}",
              flush=True)
    return out


def cmd_replay(args: argparse.Namespace) -> int:
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - set(TARGETS)
    if unknown or not targets:
        raise CLIError(f"unknown target(s) {sorted(unknown)}; known: {', '.join(TARGETS)}")
    if args.vllm_url and sum(t != "fairway" for t in targets) > 1:
        raise CLIError("--vllm-url serves one vllm-* target; name only one")
    plan = make_plan(args)
    admin = AdminClient(args) if "fairway" in targets else None
    keys = tenant_keys(admin, plan) if admin is not None else {}
    model = args.model or _default_model(args, keys)
    slo = plan_targets(admin)
    results = [(name, run_target(name, plan, args, model, keys)) for name in targets]
    print(markdown(results, slo))
    if args.json:
        args.json.write_text(json.dumps(figures(results, slo), indent=1))
    return 0


def _default_model(args: argparse.Namespace, keys: dict[str, str]) -> str:
    if keys:
        import httpx

        resp = httpx.get(api_root(args) + "/v1/models", timeout=30,
                         headers={"Authorization": f"Bearer {next(iter(keys.values()))}"})
        if resp.status_code == 200 and resp.json().get("data"):
            return str(resp.json()["data"][0]["id"])
    from service.store.settings import EngineSettings

    return EngineSettings().served_model_name


def figures(results: list[tuple[str, Outcomes]], slo: dict[str, float]) -> dict[str, Any]:
    return {name: {"realtime": [r.__dict__ for r in realtime_rows(o, slo)],
                   "batch": [b.__dict__ for b in batch_rows(o)],
                   "duration_s": o.duration_s, "wall_s": o.wall_s}
            for name, o in results}
