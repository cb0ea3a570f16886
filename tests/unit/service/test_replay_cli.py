"""`fairway bench replay`'s argument checks: one-line errors before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.cli.main import main
from service.cli.replay.cli import read_mix
from service.cli.replay.plan import DEFAULT_MIX


def _err(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return code, err


def test_bad_window_and_target_are_usage_errors(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,4\n")
    code, err = _err(capsys, "bench", "replay", str(trace), "--window", "5,1")
    assert code == 2 and "START < END" in err
    code, err = _err(capsys, "bench", "replay", str(trace), "--targets", "sglang")
    assert code == 1 and "unknown target" in err
    code, err = _err(capsys, "bench", "replay", str(trace), "--window", "100,200",
                     "--targets", "vllm-fcfs")
    assert code == 1 and "no request of the trace falls in the window" in err


def test_mix_from_text_a_file_or_the_default(tmp_path: Path) -> None:
    mix = [{"tenant": "a", "share": 2}]
    assert read_mix(json.dumps(mix)) == mix
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(mix))
    assert read_mix(str(path)) == mix
    assert read_mix(None) == [dict(e) for e in DEFAULT_MIX]
