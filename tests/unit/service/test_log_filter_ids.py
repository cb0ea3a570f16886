"""`fairway logs` takes the ids the explorer and the API show: a batch's id picks its lines, a
batch output line's req_<hex> and batch_req_<hex> pick that line's job, and --request-id picks
the lines logged while serving one request (the "job created" line joins it to the job)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from service.cli.logview import LineFilter, render
from service.cli.main import main
from service.cli.state import logs_dir
from service.store.telemetry.logfmt import JsonFormatter

JOB = uuid.UUID("5f0c0000-0000-4000-8000-000000000001")
OTHER = uuid.UUID("91ab0000-0000-4000-8000-000000000002")
BATCH = uuid.UUID("0d4e0000-0000-4000-8000-000000000003")


def _line(msg: str, **extra: object) -> str:
    record = logging.LogRecord("fairway.api", logging.INFO, __file__, 1, msg, (), None)
    record.__dict__.update(extra)
    return JsonFormatter().format(record)


def test_a_batch_id_picks_its_lines_not_a_job_with_the_same_hex():
    only = LineFilter(job=f"batch_{BATCH.hex}")
    assert render(_line("line ended", job_id=str(JOB), batch_id=str(BATCH)), raw=False,
                  only=only) is not None
    assert render(_line("other batch", job_id=str(JOB), batch_id=str(OTHER)), raw=False,
                  only=only) is None
    assert render(_line("a job named like the batch", job_id=str(BATCH)), raw=False,
                  only=only) is None


@pytest.mark.parametrize("spelling", [f"req_{JOB.hex}", f"batch_req_{JOB.hex}"])
def test_a_batch_output_lines_ids_pick_its_job(spelling: str):
    only = LineFilter(job=spelling)
    assert render(_line("a", job_id=str(JOB), batch_id=str(BATCH)), raw=False,
                  only=only) is not None
    assert render(_line("b", job_id=str(OTHER), batch_id=str(BATCH)), raw=False,
                  only=only) is None


def test_fairway_logs_by_request_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = logs_dir(tmp_path)
    folder.mkdir(parents=True)
    record = logging.LogRecord("fairway.jobs", logging.INFO, __file__, 1, "job created", (),
                               None)
    record.__dict__.update(job_id=str(JOB))
    created = json.loads(JsonFormatter().format(record)) | {"request_id": "req_abc"}
    lines = [json.dumps(created), _line("other request", request_id="req_def"), _line("idle")]
    (folder / "api.log").write_text("\n".join(lines) + "\n")
    assert main(["--data-dir", str(tmp_path), "logs", "api", "--no-follow",
                 "--request-id", "req_abc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "job created" in out[0] and f"job=job_{JOB.hex}" in out[0]
    assert "request_id=req_abc" in out[0]
