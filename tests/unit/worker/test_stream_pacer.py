"""StreamPacer: what of a job's text goes to its stream now, and what waits to be merged."""

from __future__ import annotations

from service.store.job_stream import Delta
from worker.stream_pacer import StreamPacer


def d(text: str, offset: int, traceparent: str | None = None) -> Delta:
    return Delta(1, text, 1, offset, traceparent)


def test_the_first_text_goes_at_once_and_the_rest_waits_for_the_interval() -> None:
    pacer = StreamPacer(0.25)
    assert pacer.add(d("a", 0, "tp"), 10.0) == d("a", 0, "tp")
    assert pacer.add(d("b", 1), 10.1) is None
    assert pacer.add(d("c", 2), 10.2) is None
    merged = pacer.add(d("d", 3), 10.3)  # 0.3 s since the last sent
    assert merged == Delta(1, "bcd", 3, 1, None)
    assert pacer.add(d("e", 4), 10.4) is None
    assert pacer.flush() == Delta(1, "e", 1, 4, None)
    assert pacer.flush() is None


def test_an_interval_of_zero_sends_every_delta() -> None:
    pacer = StreamPacer(0.0)
    assert [pacer.add(d(c, i), 1.0) for i, c in enumerate("abc")] == [
        d("a", 0), d("b", 1), d("c", 2)]
    assert pacer.flush() is None


def test_a_held_traceparent_is_kept() -> None:
    pacer = StreamPacer(1.0)
    pacer.add(d("a", 0), 0.0)
    pacer.add(d("b", 1, "tp"), 0.1)
    assert pacer.add(d("c", 2), 1.5) == Delta(1, "bc", 2, 1, "tp")
