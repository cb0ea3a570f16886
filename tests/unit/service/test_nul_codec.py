"""U+0000 survives storage in JSONB through a reversible escape."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from service.store import nul_codec

ESC = nul_codec.ESC
tricky = st.text(alphabet=st.sampled_from(["a", "0", "\x00", ESC, "\\", "u"]), max_size=20)


@given(st.recursive(tricky | st.integers() | st.none(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(tricky, inner, max_size=3), max_leaves=10))
def test_round_trip_and_no_nul_stored(value: object) -> None:
    stored = nul_codec.encode(value)
    assert not any("\x00" in s for s in strings(stored))  # what JSONB refuses
    assert nul_codec.decode(stored) == value


def strings(value: object) -> list[str]:
    """Every string in a JSON-like value, dict keys included. (Searching json.dumps for the
    text \\u0000 would also flag a harmless literal backslash-u-0-0-0-0.)"""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    return []


def test_plain_requests_are_stored_as_sent() -> None:
    body = {"messages": [{"role": "user", "content": "hello \\u0000 as text"}], "stop": ["x"]}
    assert nul_codec.encode(body) == body
    text = json.dumps(body)
    assert json.loads(nul_codec.encode_json_text(text)) == body  # "\\u0000" is just text
    plain = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    assert nul_codec.encode_json_text(plain) is plain  # the common case is not even parsed


def test_json_text_path_matches_the_object_path() -> None:
    body = {"messages": [{"role": "user", "content": "a\x00b" + ESC}]}
    encoded = nul_codec.encode_json_text(json.dumps(body))
    assert json.loads(encoded) == nul_codec.encode(body)
    assert nul_codec.decode(json.loads(encoded)) == body
