"""The wake-up codec: every message survives its wire format, and junk decodes to None."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.store import wakeups as w

ids = st.uuids()
workers = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                  min_size=1, max_size=40)
counts = st.integers(min_value=0, max_value=10**7)
# W3C traceparents, as the API's insert span writes them (service.store.tracing)
traceparents = st.builds(lambda t, s, f: f"00-{t:032x}-{s:016x}-{f:02x}",
                         st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1),
                         st.integers(0, 255))
finite = st.floats(min_value=0, max_value=1e10, allow_nan=False)
views = st.builds(w.PlacedView, ids, finite, st.integers(0, 100), workers, finite,
                  st.none() | finite, counts, counts, st.none() | st.text(max_size=16),
                  counts, st.none() | finite, st.integers(0, 1000), st.none() | finite)
messages = st.one_of(
    st.builds(w.JobQueued, ids, st.none() | traceparents),
    st.builds(w.JobPlaced, ids, workers, workers.filter(lambda t: ":" not in t),
              st.none() | traceparents, views),
    st.builds(w.JobEnded, ids, workers, counts, counts),
    st.builds(w.JobParked, ids, workers, counts),
    st.builds(w.JobCancelled, ids),
    st.just(w.Rescan()),
)
commands = st.one_of(st.builds(w.AbortJob, ids.map(str), counts),
                     st.builds(w.PreemptJob, ids.map(str)))


@given(messages)
def test_every_wakeup_round_trips(message: w.Wakeup) -> None:
    assert w.decode(w.encode(message)) == message


@given(commands)
def test_every_command_round_trips(command: w.Command) -> None:
    assert w.decode_command(w.encode_command(command)) == command


def test_the_wire_format_is_the_documented_one() -> None:
    job = uuid.UUID(int=1)
    assert w.encode(w.JobEnded(job, "gpu-0", 12, 34)) == f"done:{job}:gpu-0:12:34"
    assert w.encode(w.JobParked(job, "gpu-0", 7)) == f"requeue:{job}:gpu-0:7"
    assert w.encode(w.JobQueued(job)) == f"new:{job}"
    traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert w.encode(w.JobQueued(job, traced)) == f"new:{job}:{traced}"
    assert w.encode(w.Rescan()) == "scan"
    assert w.decode(f"placed:{job}:7::gpu:0") is None  # a placed job carries its view
    view = w.PlacedView(job, 2.0, 1, "m", 1.5, None, 64, 10, None, 0, 0.5, 1, 30.0)
    assert w.encode(w.JobPlaced(job, "gpu:0", "7", traced, view)) == (
        f'placedv:{job}:7:{traced}:{{"w":"gpu:0","t":"{job}","tw":2.0,"p":1,"m":"m",'
        f'"a":1.5,"d":null,"mt":64,"pe":10,"pk":null,"pt":0,"s":0.5,"n":1,"q":30.0}}')


@pytest.mark.parametrize("payload", ["", "new:", "new:not-a-uuid", "done:x", "bogus:1",
                                     f"done:{uuid.UUID(int=1)}:w:many:tokens",
                                     f"requeue:{uuid.UUID(int=1)}",
                                     f"placedv:{uuid.UUID(int=1)}:7::not json",
                                     f"placedv:{uuid.UUID(int=1)}:7::[1]",
                                     f'placedv:{uuid.UUID(int=1)}:7::{{"w":"gpu"}}',
                                     f'placedv:{uuid.UUID(int=1)}:::{{"w":"gpu"}}'])
def test_junk_decodes_to_none(payload: str) -> None:
    assert w.decode(payload) is None


@pytest.mark.parametrize("raw", [b"", b"{}", b'{"op": "abort"}', b'{"op": "dance"}', b"[1]",
                                 b'{"op": "abort", "job_id": "j", "attempt": "x"}'])
def test_junk_commands_decode_to_none(raw: bytes) -> None:
    assert w.decode_command(raw) is None
