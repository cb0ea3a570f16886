"""Log lines join what users are shown: public ids (job_..., batch_...) beside the UUIDs, and
`fairway logs` prints readable lines, filtered by job, tenant and level."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from service.cli.logview import LineFilter, readable, render
from service.cli.main import main
from service.cli.state import logs_dir
from service.store.telemetry.logfmt import JsonFormatter, TextFormatter

JOB = uuid.UUID("5f0c0000-0000-4000-8000-000000000001")
OTHER = uuid.UUID("91ab0000-0000-4000-8000-000000000002")
BATCH = uuid.UUID("0d4e0000-0000-4000-8000-000000000003")
TENANT = "7c1b0000-0000-4000-8000-000000000004"


def _line(msg: str, level: int = logging.INFO, **extra: object) -> str:
    record = logging.LogRecord("fairway.worker", level, __file__, 1, msg, (), None)
    record.__dict__.update(extra)
    return JsonFormatter().format(record)


def test_public_ids_are_logged_beside_the_uuids():
    data = json.loads(_line("job ended: succeeded", job_id=str(JOB), batch_id=BATCH))
    assert data["job_id"] == str(JOB) and data["job"] == f"job_{JOB.hex}"
    assert data["batch"] == f"batch_{BATCH.hex}"
    assert "job" not in json.loads(_line("no id", job_id="not-a-uuid"))
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    record.__dict__.update(job_id=str(JOB))
    assert f"job=job_{JOB.hex}" in TextFormatter().format(record)


def test_readable_line_names_the_job_tenant_and_tokens():
    text = readable(json.loads(_line("job ended: succeeded", job_id=str(JOB), tenant_id=TENANT,
                                     prompt_tokens=12, completion_tokens=30)))
    assert "INFO" in text and "fairway.worker" in text and "job ended: succeeded" in text
    assert f"job=job_{JOB.hex} tenant={TENANT}" in text
    assert "completion_tokens=30" in text and "prompt_tokens=12" in text
    assert str(JOB) not in text  # the public id stands for it
    assert not text.lstrip().startswith("{")


@pytest.mark.parametrize("wanted", [f"job_{JOB.hex}", str(JOB), f"chatcmpl-{JOB.hex}"])
def test_filters_pick_lines_by_job_in_any_spelling(wanted: str):
    only = LineFilter(job=wanted)
    assert render(_line("a", job_id=str(JOB)), raw=False, only=only) is not None
    assert render(_line("b", job_id=str(OTHER)), raw=False, only=only) is None
    assert render(_line("c"), raw=False, only=only) is None
    assert render("Traceback (most recent call last):", raw=False, only=only) is None


def test_filters_by_tenant_and_level():
    assert render(_line("a", tenant_id=TENANT), raw=False,
                  only=LineFilter(tenant=TENANT)) is not None
    assert render(_line("a", tenant_id=TENANT), raw=False,
                  only=LineFilter(tenant="someone-else")) is None
    warn = LineFilter(level="WARNING")
    assert render(_line("w", logging.WARNING), raw=False, only=warn) is not None
    assert render(_line("e", logging.ERROR), raw=False, only=warn) is not None
    assert render(_line("i"), raw=False, only=warn) is None
    # Unfiltered, a line that is not JSON (a crash's traceback) is shown as it is.
    assert render("plain text", raw=False, only=LineFilter()) == "plain text\n"


def test_fairway_logs_reads_filters_and_prints_json_on_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = logs_dir(tmp_path)
    folder.mkdir(parents=True)
    lines = [_line("job ended: succeeded", job_id=str(JOB), tenant_id=TENANT,
                   prompt_tokens=3, completion_tokens=4),
             _line("job ended: failed", logging.WARNING, job_id=str(OTHER), tenant_id=TENANT),
             _line("idle")]
    (folder / "worker.log").write_text("\n".join(lines) + "\n")
    base = ["logs", "worker", "--data-dir", str(tmp_path), "--no-follow"]
    assert main(base) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and f"job=job_{JOB.hex}" in out[0] and "{" not in out[0]
    assert main([*base, "--job", f"job_{JOB.hex}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "completion_tokens=4" in out[0]
    assert main([*base, "--level", "warning"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[1] == "WARNING"
    assert main([*base, "--tenant", TENANT, "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["msg"] for line in out] == ["job ended: succeeded",
                                                         "job ended: failed"]
