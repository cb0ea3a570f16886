"""The operator CLI without a server: Ctrl-C while following a batch says the batch goes on
(with its id and the commands to follow or cancel it), and the key and tenant flags refuse
bad values in one line with exit code 2."""

from __future__ import annotations

import datetime as dt
import types
from pathlib import Path

import pytest

from service.cli import batch, keys
from service.cli.main import main


class _InterruptedBatches:
    """A client whose second poll is interrupted, as Ctrl-C interrupts the sleep or a read."""

    def __init__(self) -> None:
        self.polls = 0

    def retrieve(self, batch_id: str) -> types.SimpleNamespace:
        self.polls += 1
        if self.polls > 1:
            raise KeyboardInterrupt
        counts = types.SimpleNamespace(completed=1, failed=0, total=4)
        return types.SimpleNamespace(id=batch_id, status="in_progress", request_counts=counts)


def test_ctrl_c_while_following_says_the_batch_goes_on(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path):
    client = types.SimpleNamespace(batches=_InterruptedBatches())
    code = batch._follow(client, "batch_abc123", tmp_path / "out.jsonl", poll_s=0)
    err = capsys.readouterr().err
    assert code == 130
    assert "batch_abc123" in err and "goes on on the server" in err
    assert "fairway batch wait batch_abc123" in err
    assert "fairway batch cancel batch_abc123" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["key", "create", "acme", "--expires", "soon"],
    ["key", "create", "acme", "--expires", "2001-01-01"],
    ["key", "create", "acme", "--rpm", "0"],
    ["key", "create", "acme", "--models", ","],
    ["key", "set", "k", "--concurrency", "lots"],
    ["key", "revoke"],
    ["tenant", "set", "acme", "--rpm", "-3"],
    ["tenant", "set", "acme", "--tpm", "many"],
    ["tenant", "delete"],
])
def test_bad_operator_flags_are_one_line_with_exit_code_2(capsys: pytest.CaptureFixture[str],
                                                          argv: list[str]):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "--help" in err


def test_expiry_spans_and_dates():
    now = dt.datetime.now(dt.UTC)
    assert abs(keys._expiry("30d") - (now + dt.timedelta(days=30))) < dt.timedelta(seconds=5)
    assert abs(keys._expiry("12h") - (now + dt.timedelta(hours=12))) < dt.timedelta(seconds=5)
    assert keys._expiry("2999-01-31") == dt.datetime(2999, 1, 31, tzinfo=dt.UTC)
    assert keys._expiry_or_never("never") == keys.NEVER
    assert keys._models_or_all("all") == keys.ALL_MODELS
    assert keys._models(" a, b ,a") == ["a", "b", "a"]  # the server keeps each once


def test_a_keys_policy_cell():
    assert keys._policy({"requests_per_minute": None, "allowed_models": None}) == "-"
    assert keys._policy({"requests_per_minute": 5, "concurrent_requests": 2,
                         "allowed_models": ["m1", "m2"]}) == "rpm 5; concurrency 2; models m1,m2"
