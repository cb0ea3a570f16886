"""A job stream entry survives Redis (str/int fields, bytes back) exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from service.store import job_stream as js

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
ints = st.integers(min_value=0, max_value=10**6)
reasons = st.sampled_from([None, "stop", "length"])
entries = st.one_of(
    st.builds(js.Delta, ints, text, ints, ints,
              st.none() | st.just("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")),
    st.builds(js.Final, ints, reasons, ints, ints, st.booleans()),
    st.builds(js.Failure, ints, st.integers(400, 599), st.none() | st.just("slo_unattainable"),
              text, st.none() | ints, st.none() | st.just("response_format")),
)


def _through_redis(fields: js.Fields) -> dict[bytes, bytes]:
    return {k.encode(): str(v).encode() for k, v in fields.items()}


@given(entries)
def test_every_entry_round_trips(entry: js.Entry) -> None:
    assert js.parse(_through_redis(js.fields(entry))) == entry


def test_unknown_or_malformed_entries_parse_to_none() -> None:
    assert js.parse({b"type": b"mystery"}) is None
    assert js.parse({b"type": b"delta", b"attempt": b"one"}) is None
    assert js.parse({b"type": b"delta", b"attempt": b"1", b"text": b"x"}) is None  # no offset
    assert js.parse({}) is None


def test_a_final_entry_names_a_settled_quota_only_when_it_was():
    assert "settled" not in js.fields(js.Final(1, "stop", 3, 4))
    assert js.fields(js.Final(1, "stop", 3, 4, settled=True))["settled"] == 1
    # A final entry without the mark: the worker settled nothing, the API releases the quota.
    assert js.parse({b"type": b"final", b"attempt": b"1"}) == js.Final(1, None, 0, 0, False)
