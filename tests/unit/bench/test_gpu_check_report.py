"""bench/gpu_check_report.py: the GPU check's table from the benches' JSON outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_check_report as report


def realtime_json(fair_p50: float = 20.0, fair_p99: float = 24.0, tok: float = 1000.0,
                  tpot: float = 5.0, failed: int = 0) -> dict[str, Any]:
    def side(p50: float, p99: float, tok_s: float, tpot_ms: float, fails: int) -> dict[str, Any]:
        return {"probe": {"ttft_p50_ms": p50, "ttft_p99_ms": p99},
                "summary": {"output_tok_s": tok_s, "tpot_content_p50_ms": tpot_ms,
                            "failed": fails}}

    return {"config": {}, "comparison": {},
            "rounds": [{"round": 1, "vllm": side(18.0, 20.0, 1000.0, 5.0, 0),
                        "fairway": side(fair_p50, fair_p99, tok, tpot, failed)}]}


def setup_json(busy: list[float], preemptions: int = 3, guard: int = 0,
               kv_connector: str | None = None) -> dict[str, Any]:
    return {"busy_ttft_s": busy, "idle_ttft_s": [0.01], "preemptions": preemptions,
            "guard": guard, "kv_connector": kv_connector, "batch_identical": [8, 8]}


def engine_json(swap_connector: str | None = "OffloadingConnector") -> dict[str, Any]:
    return {"stock": setup_json([1.0, 1.2, 1.1], preemptions=0),
            "Fairway, guard off": setup_json([0.2, 0.3, 0.25]),
            "Fairway": setup_json([0.1, 0.12, 0.11], guard=480),
            "Fairway, swap": setup_json([0.1, 0.1, 0.1], guard=480, kv_connector=swap_connector)}


def served_json(fair_ratio: float = 1.3, finished: int = 12) -> dict[str, Any]:
    return {"config": {"batch": 12, "preemption_mode": "swap"},
            "results": {"b": {"busy_over_idle_p50": 30.0, "realtime_failed": 0,
                              "batch_finished": 12},
                        "c": {"busy_over_idle_p50": fair_ratio, "realtime_failed": 0,
                              "batch_finished": finished}}}


def phase_json(median: float = 0.05, n: int = 40) -> dict[str, Any]:
    return {"period_s": 0.05, "aimed": {"n": n, "median": median, "p90": 0.1}}


def write_run(tmp: Path, rcs: dict[str, int] | None = None, **data: Any) -> Path:
    payloads = {"realtime": realtime_json(), "engine_preemption": engine_json(),
                "preemption_vs_vllm": served_json(), "phase_lock": phase_json(), **data}
    lines = []
    for step, payload in payloads.items():
        if payload is not None:
            (tmp / report.STEP_FILES[step]).write_text(json.dumps(payload))
        lines.append(f"{step}\t{(rcs or {}).get(step, 0)}\t42\t100")
    (tmp / "steps.tsv").write_text("\n".join(lines) + "\n")
    return tmp


def verdicts(tmp: Path, cpu_smoke: bool = False) -> dict[str, str]:
    steps = report.read_steps(tmp / "steps.tsv")
    return {r.check: r.verdict for step in report.STEP_ROWS
            for r in report.rows_for(step, tmp, steps, cpu_smoke)}


def test_all_targets_met_passes_every_row_and_exits_zero(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path)
    assert set(verdicts(tmp_path).values()) == {report.PASS}
    assert len(verdicts(tmp_path)) == 9
    assert report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "idle TTFT p50 ms" in out and "+2.0 ms" in out
    assert json.loads((tmp_path / "summary.json").read_text())[0]["verdict"] == report.PASS


@pytest.mark.parametrize(("kwargs", "check"), [
    ({"fair_p50": 21.5}, "idle TTFT p50 ms"),  # +3.5 ms > +3 ms
    ({"fair_p99": 25.5}, "idle TTFT p99 ms"),  # +5.5 ms > +5 ms
    ({"tok": 985.0}, "output tok/s (burst)"),  # 0.985x < 0.99x
    ({"failed": 1}, "output tok/s (burst)"),  # failed requests fail throughput
    ({"tpot": 5.06}, "TPOT p50 ms (burst)"),  # +1.2% > +1%
])
def test_realtime_thresholds(tmp_path: Path, kwargs: dict[str, Any], check: str) -> None:
    got = verdicts(write_run(tmp_path, realtime=realtime_json(**kwargs)))
    assert got[check] == report.FAIL
    assert [c for c, v in got.items() if v == report.FAIL] == [check]


def test_thresholds_are_inclusive(tmp_path: Path) -> None:
    at_limits = realtime_json(fair_p50=21.0, fair_p99=25.0, tok=990.0, tpot=5.05)
    got = verdicts(write_run(tmp_path, realtime=at_limits))
    assert all(v == report.PASS for v in got.values())


def test_failed_step_fails_its_rows_only(tmp_path: Path) -> None:
    write_run(tmp_path, rcs={"engine_preemption": 124})
    steps = report.read_steps(tmp_path / "steps.tsv")
    rows = report.rows_for("engine_preemption", tmp_path, steps, False)
    assert [r.verdict for r in rows] == [report.FAIL] * 3
    assert "timed out after 100 s" in rows[0].note
    assert verdicts(tmp_path)["idle TTFT p50 ms"] == report.PASS


def test_missing_json_and_unreadable_json_fail(tmp_path: Path) -> None:
    write_run(tmp_path, phase_lock=None, preemption_vs_vllm={"results": {}})
    steps = report.read_steps(tmp_path / "steps.tsv")
    (phase,) = report.rows_for("phase_lock", tmp_path, steps, False)
    assert phase.verdict == report.FAIL and "no phase_lock.json" in phase.note
    (served,) = report.rows_for("preemption_vs_vllm", tmp_path, steps, False)
    assert served.verdict == report.FAIL and "unreadable" in served.note
    assert report.main([str(tmp_path)]) == 1


def test_step_that_never_ran(tmp_path: Path) -> None:
    (phase,) = report.rows_for("phase_lock", tmp_path, {}, False)
    assert phase.verdict == report.FAIL and "did not run" in phase.note


def test_swap_without_offload_is_na_on_cpu_smoke_and_fails_on_gpu(tmp_path: Path) -> None:
    write_run(tmp_path, engine_preemption=engine_json(swap_connector=None))
    assert verdicts(tmp_path, cpu_smoke=True)["swap (KV offload): busy RT TTFT s"] == report.NA
    assert verdicts(tmp_path)["swap (KV offload): busy RT TTFT s"] == report.FAIL


def test_engine_mechanism_checks(tmp_path: Path) -> None:
    data = engine_json()
    data["Fairway, guard off"]["preemptions"] = 0  # no preemption: layer 1 did nothing
    data["Fairway"]["busy_ttft_s"] = [0.5, 0.5, 0.5]  # guard 2x worse than guard off
    got = verdicts(write_run(tmp_path, engine_preemption=data))
    assert got["preemption: busy RT TTFT s"] == report.FAIL
    assert got["realtime guard: busy RT TTFT s"] == report.FAIL


def test_served_and_phase_lock_checks(tmp_path: Path) -> None:
    got = verdicts(write_run(tmp_path, preemption_vs_vllm=served_json(finished=11),
                             phase_lock=phase_json(median=0.3)))
    assert got["served flood/idle RT TTFT p50"] == report.FAIL  # a batch job unfinished
    assert got["phase lock: |end-grid|/period"] == report.FAIL  # no better than unlocked
    got = verdicts(write_run(tmp_path, phase_lock=phase_json(n=0)))
    assert got["phase lock: |end-grid|/period"] == report.FAIL  # nothing aimed


def test_medians_over_rounds(tmp_path: Path) -> None:
    data = realtime_json()
    second = json.loads(json.dumps(data["rounds"][0]))
    second["fairway"]["probe"]["ttft_p50_ms"] = 30.0  # one bad round of three
    data["rounds"] += [second, json.loads(json.dumps(data["rounds"][0]))]
    assert verdicts(write_run(tmp_path, realtime=data))["idle TTFT p50 ms"] == report.PASS
