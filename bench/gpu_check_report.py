"""The one summary table of bench/gpu_check.sh, read from the benches' JSON outputs.

    python -m bench.gpu_check_report DIR [--cpu-smoke]

DIR holds what bench/gpu_check.sh wrote there: steps.tsv (one line per step: name, exit status,
seconds, timeout) and each step's JSON (realtime.json from bench/realtime_vs_vllm.py --out,
engine_preemption.json, preemption_vs_vllm.json, phase_lock.json). One row per check: the
figure, its baseline, the ratio (or difference), and pass/fail against the realtime targets
below (idle TTFT overhead <= +3 ms p50 / +5 ms p99, output throughput >= 0.99x, TPOT p50
within +1%). A step that failed, timed out or left no JSON makes its rows FAIL with the reason; the
other rows stand. Exit status 0 when no row fails.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The realtime targets for Fairway against bare vLLM on the same GPU.
IDLE_TTFT_P50_MAX_MS = 3.0
IDLE_TTFT_P99_MAX_MS = 5.0
THROUGHPUT_MIN_RATIO = 0.99
TPOT_P50_MAX_RATIO = 1.01
# Mechanism checks (no target): the guard may not make busy realtime TTFT worse than
# guard-off beyond this noise allowance; the phase lock must beat an unlocked step's expected
# distance to the nearest grid point (a quarter period).
GUARD_MAX_RATIO = 1.10
UNLOCKED_DISTANCE = 0.25

PASS, FAIL, NA = "pass", "FAIL", "n/a"
STEP_FILES = {"realtime": "realtime.json", "engine_preemption": "engine_preemption.json",
              "preemption_vs_vllm": "preemption_vs_vllm.json", "phase_lock": "phase_lock.json"}


@dataclass(frozen=True)
class Row:
    check: str
    figure: str
    baseline: str
    ratio: str
    verdict: str
    note: str = ""


@dataclass(frozen=True)
class Step:
    name: str
    rc: int
    seconds: float
    timeout_s: float

    def status(self) -> str:
        if self.rc == 0:
            return f"ran {self.seconds:.0f} s"
        if self.rc in (124, 137):
            return f"timed out after {self.timeout_s:.0f} s"
        return f"exited {self.rc} after {self.seconds:.0f} s"


def read_steps(path: Path) -> dict[str, Step]:
    steps: dict[str, Step] = {}
    if not path.is_file():
        return steps
    for line in path.read_text().splitlines():
        name, rc, seconds, timeout_s = line.split("\t")
        steps[name] = Step(name, int(rc), float(seconds), float(timeout_s))
    return steps


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def num(value: float, spec: str) -> str:
    return "n/a" if value is None or math.isnan(value) else format(value, spec)


def median(xs: list[float]) -> float:
    vals = sorted(x for x in xs if x == x)
    if not vals:
        return math.nan
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


# -- realtime vs bare vLLM (bench/realtime_vs_vllm.py --out) ------------------------------------
def _rt_median(data: dict[str, Any], system: str, section: str, key: str) -> float:
    return median([r[system][section][key] for r in data["rounds"]])


def _diff_row(check: str, data: dict[str, Any], key: str, limit_ms: float) -> Row:
    mine = _rt_median(data, "fairway", "probe", key)
    base = _rt_median(data, "vllm", "probe", key)
    diff = mine - base
    return Row(check, num(mine, ".1f"), num(base, ".1f"), f"{diff:+.1f} ms",
               PASS if diff <= limit_ms else FAIL, f"target <= +{limit_ms:g} ms")


def realtime_rows(data: dict[str, Any]) -> list[Row]:
    failed = sum(r[s]["summary"]["failed"] for r in data["rounds"] for s in ("vllm", "fairway"))
    tok = _rt_median(data, "fairway", "summary", "output_tok_s")
    tok_base = _rt_median(data, "vllm", "summary", "output_tok_s")
    tpot = _rt_median(data, "fairway", "summary", "tpot_content_p50_ms")
    tpot_base = _rt_median(data, "vllm", "summary", "tpot_content_p50_ms")
    tok_ok = tok / tok_base >= THROUGHPUT_MIN_RATIO and not failed
    return [
        _diff_row("idle TTFT p50 ms", data, "ttft_p50_ms", IDLE_TTFT_P50_MAX_MS),
        _diff_row("idle TTFT p99 ms", data, "ttft_p99_ms", IDLE_TTFT_P99_MAX_MS),
        Row("output tok/s (burst)", num(tok, ".1f"), num(tok_base, ".1f"),
            f"{tok / tok_base:.3f}x", PASS if tok_ok else FAIL,
            f"target >= {THROUGHPUT_MIN_RATIO}x"
            + (f"; {failed} requests failed" if failed else "")),
        Row("TPOT p50 ms (burst)", num(tpot, ".2f"), num(tpot_base, ".2f"),
            f"{tpot / tpot_base:.3f}x", PASS if tpot / tpot_base <= TPOT_P50_MAX_RATIO else FAIL,
            f"target <= {TPOT_P50_MAX_RATIO}x"),
    ]


# -- in-engine preemption, guard and swap (bench/engine_preemption.py --out) --------------------
def _busy(setup: dict[str, Any]) -> float:
    return median(setup["busy_ttft_s"])


def engine_rows(data: dict[str, Any], cpu_smoke: bool) -> list[Row]:
    stock = data["stock"]
    preempt = data.get("Fairway, guard off") or data["Fairway"]
    guarded = data["Fairway"]
    rows = []
    ratio = _busy(preempt) / _busy(stock)
    ok = preempt["preemptions"] > 0 and ratio < 1
    rows.append(Row("preemption: busy RT TTFT s", num(_busy(preempt), ".3f"),
                    num(_busy(stock), ".3f"), f"{ratio:.2f}x", PASS if ok else FAIL,
                    f"{preempt['preemptions']} preemptions; vs vLLM priority alone; "
                    f"batch identical {preempt['batch_identical'][0]}/"
                    f"{preempt['batch_identical'][1]}"))
    if "Fairway, guard off" in data:
        ratio = _busy(guarded) / _busy(preempt)
        rows.append(Row("realtime guard: busy RT TTFT s", num(_busy(guarded), ".3f"),
                        num(_busy(preempt), ".3f"), f"{ratio:.2f}x",
                        PASS if ratio <= GUARD_MAX_RATIO else FAIL,
                        f"vs guard off; chunk {guarded['guard']}; <= {GUARD_MAX_RATIO}x"))
    swap = data.get("Fairway, swap")
    if swap is not None:
        ratio = _busy(swap) / _busy(guarded)
        active = bool(swap.get("kv_connector"))
        if not active:
            verdict, note = (NA if cpu_smoke else FAIL), "no KV offload (needs CUDA): recompute"
        else:
            verdict = PASS if swap["preemptions"] > 0 else FAIL
            note = f"{swap['kv_connector']}, {swap['preemptions']} preemptions; vs recompute"
        rows.append(Row("swap (KV offload): busy RT TTFT s", num(_busy(swap), ".3f"),
                        num(_busy(guarded), ".3f"), f"{ratio:.2f}x", verdict, note))
    return rows


# -- served preemption (bench/preemption_vs_vllm.py --out) -------------------------------------
def served_rows(data: dict[str, Any]) -> list[Row]:
    results, config = data["results"], data["config"]
    mine, base = results["c"], results["b"]
    ok = (mine["busy_over_idle_p50"] <= base["busy_over_idle_p50"]
          and not mine["realtime_failed"] and mine["batch_finished"] == config["batch"])
    ratio = mine["busy_over_idle_p50"] / base["busy_over_idle_p50"]
    return [Row("served flood/idle RT TTFT p50", f"{mine['busy_over_idle_p50']:.2f}x",
                f"{base['busy_over_idle_p50']:.2f}x", f"{ratio:.2f}x", PASS if ok else FAIL,
                f"vs vLLM priority; batch {mine['batch_finished']}/{config['batch']} done, "
                f"{mine['realtime_failed']} RT failed; "
                f"mode {config.get('preemption_mode') or 'default'}")]


# -- step phase lock (bench/phase_lock_vllm.py --out) ------------------------------------------
def phase_rows(data: dict[str, Any]) -> list[Row]:
    aimed = data["aimed"]
    figure = aimed.get("median", math.nan)
    ok = aimed["n"] > 0 and figure < UNLOCKED_DISTANCE
    return [Row("phase lock: |end-grid|/period", num(figure, ".3f"), f"{UNLOCKED_DISTANCE}",
                f"{figure / UNLOCKED_DISTANCE:.2f}x" if aimed["n"] else "n/a",
                PASS if ok else FAIL,
                f"{aimed['n']} aimed steps; period {data['period_s']:g} s; vs unlocked")]


STEP_ROWS: dict[str, tuple[list[str], Callable[[Any, bool], list[Row]]]] = {
    "realtime": (["idle TTFT p50 ms", "idle TTFT p99 ms", "output tok/s (burst)",
                  "TPOT p50 ms (burst)"], lambda d, _: realtime_rows(d)),
    "engine_preemption": (["preemption: busy RT TTFT s", "realtime guard: busy RT TTFT s",
                           "swap (KV offload): busy RT TTFT s"], engine_rows),
    "preemption_vs_vllm": (["served flood/idle RT TTFT p50"], lambda d, _: served_rows(d)),
    "phase_lock": (["phase lock: |end-grid|/period"], lambda d, _: phase_rows(d)),
}


def rows_for(step: str, out_dir: Path, steps: dict[str, Step], cpu_smoke: bool) -> list[Row]:
    """The step's rows from its JSON; FAIL rows saying why where it has none to give."""
    checks, make = STEP_ROWS[step]
    ran = steps.get(step)
    status = ran.status() if ran else "did not run"
    data = read_json(out_dir / STEP_FILES[step])
    if data is not None and (ran is None or ran.rc == 0):
        try:
            return make(data, cpu_smoke)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as exc:
            status = f"{status}; unreadable figures ({type(exc).__name__}: {exc})"
    elif data is None:
        status = f"{status}; no {STEP_FILES[step]}"
    return [Row(c, "-", "-", "-", FAIL, f"{step}: {status}") for c in checks]


def table(rows: list[Row]) -> str:
    head = Row("check", "figure", "baseline", "ratio", "verdict", "note")
    cols = [max(len(getattr(r, f)) for r in [head, *rows])
            for f in ("check", "figure", "baseline", "ratio", "verdict")]
    lines = []
    for r in [head, *rows]:
        cells = (r.check, r.figure, r.baseline, r.ratio, r.verdict)
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(cells, cols, strict=True)))
                     + f"  {r.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="figures from a CPU smoke run: swap without CUDA is n/a")
    args = parser.parse_args(argv)
    steps = read_steps(args.dir / "steps.tsv")
    rows = [row for step in STEP_ROWS for row in rows_for(step, args.dir, steps, args.cpu_smoke)]
    smoke = " (CPU smoke: tiny sizes, not the GPU targets)" if args.cpu_smoke else ""
    print(f"\nFairway GPU check{smoke}: baseline = bare vLLM unless noted")
    for step in STEP_ROWS:
        print(f"  {step}: {steps[step].status() if step in steps else 'did not run'}")
    print(table(rows))
    failed = sum(r.verdict == FAIL for r in rows)
    print(f"\n{len(rows) - failed}/{len(rows)} checks not failed")
    (args.dir / "summary.json").write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
