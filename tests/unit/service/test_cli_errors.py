"""The CLI without tracebacks: every error is one line in plain words on stderr and a non-zero
exit code; --help gives every option's default; global options work anywhere on the line.
(The errors that need a running stack are in tests/integration/test_cli_up.py.)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from service.cli.embedded import free_port
from service.cli.main import build_parser, main
from service.cli.options import split_global_options


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's exits (usage errors, --help)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str) -> str:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def nowhere(tmp_path: Path) -> list[str]:
    """Global options for a server that is down (a closed port), and a data directory with no
    running stack in it."""
    return ["--base-url", f"http://127.0.0.1:{free_port()}/v1", "--api-key", "fw-x",
            "--data-dir", str(tmp_path / "data")]


def test_a_missing_file_is_one_line(capsys: pytest.CaptureFixture[str], nowhere: list[str],
                                    tmp_path: Path):
    code, _, err = _run(capsys, "batch", "submit", str(tmp_path / "nope.jsonl"), *nowhere)
    assert "no such file" in _one_line_error(code, err)


def test_a_server_that_is_down_is_one_line(capsys: pytest.CaptureFixture[str],
                                           nowhere: list[str]):
    for argv in (["batch", "list"], ["batch", "status", "batch_x"], ["tenant", "list"],
                 ["key", "create", "acme"]):
        code, _, err = _run(capsys, *argv, *nowhere)
        assert "cannot reach the Fairway API" in _one_line_error(code, err), argv


def test_a_malformed_window_stops_before_anything_is_sent(
        capsys: pytest.CaptureFixture[str], nowhere: list[str], tmp_path: Path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"custom_id": "a", "url": "/v1/chat/completions"}) + "\n")
    code, _, err = _run(capsys, "batch", "submit", str(path), "--window", "1 hour", *nowhere)
    assert "--window" in _one_line_error(code, err)  # not "cannot reach": nothing was sent


def test_a_file_that_is_not_jsonl_is_one_line(capsys: pytest.CaptureFixture[str],
                                              nowhere: list[str], tmp_path: Path):
    path = tmp_path / "in.jsonl"
    path.write_text("not json\n")
    code, _, err = _run(capsys, "batch", "submit", str(path), *nowhere)
    assert "line 1 is not JSON" in _one_line_error(code, err)


@pytest.mark.parametrize("argv", [
    ["batch", "list", "--limit", "abc"], ["batch", "list", "--limit", "0"], ["batch"],
    ["bogus"], ["batch", "submit"], ["tenant", "create"], ["key", "create", "acme",
                                                           "--expires-in-days", "-1"],
    ["logs", "nosuchrole"], ["batch", "list", "--api-key"]])
def test_bad_arguments_are_one_line_with_exit_code_2(capsys: pytest.CaptureFixture[str],
                                                     argv: list[str]):
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert "--help" in _one_line_error(code, err)


def test_no_logs_yet_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    code, _, err = _run(capsys, "logs", "--data-dir", str(tmp_path), "--no-follow")
    assert "no logs" in _one_line_error(code, err)


def test_global_options_work_before_and_after_the_subcommand():
    for argv in (["--api-key", "K", "--base-url", "http://h/v1", "batch", "list"],
                 ["batch", "--api-key", "K", "list", "--base-url", "http://h/v1"],
                 ["batch", "list", "--base-url=http://h/v1", "--api-key", "K"]):
        given, rest = split_global_options(argv)
        args = build_parser().parse_args(rest, namespace=given)
        assert (args.api_key, args.base_url, args.command, args.sub) == (
            "K", "http://h/v1", "batch", "list"), argv


def _walk(parser):  # type: ignore[no-untyped-def]
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _walk(sub)


def test_help_describes_every_option_with_its_default():
    for parser in _walk(build_parser()):
        text = parser.format_help()
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"{parser.prog} {action.option_strings} has no help"
            if action.default not in (None, False, "==SUPPRESS=="):
                assert "default" in action.help or f"(default: {action.default})" in " ".join(
                    text.split()), f"{parser.prog} {action.option_strings}: no default shown"


def test_settings_the_server_would_refuse_are_one_line(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAIRWAY_ENVIRONMENT", "production")  # with the default secrets
    code, _, err = _run(capsys, "tenant", "list")
    assert "FAIRWAY_SECRET_KEY must be set" in _one_line_error(code, err)


def test_migrate_without_a_database_is_one_line(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("FAIRWAY_DATABASE_URL", raising=False)  # was: a SQLAlchemy traceback
    code, _, err = _run(capsys, "migrate")
    assert "FAIRWAY_DATABASE_URL" in _one_line_error(code, err)


@pytest.mark.parametrize(("argv", "plan"), [
    (["tenant", "create", "acme"], "standard"),
    (["tenant", "create", "acme", "--plan", "premium"], "premium"),
    (["tenant", "create", "acme", "--tier", "free"], "free"),  # the first spelling still works
])
def test_tenant_create_takes_its_plan_as_plan_or_tier(argv: list[str], plan: str) -> None:
    assert build_parser().parse_args(argv).plan == plan
