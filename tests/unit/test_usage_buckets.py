"""The usage API's pure parts: bucket boundaries, pages and their cursors, the query string's
checks, and the CSV."""

from __future__ import annotations

import pytest
from starlette.datastructures import QueryParams

from service.api.usage_params import usage_query
from service.usage.buckets import BadCursor, decode_cursor, encode_cursor, page_window
from service.usage.usage_csv import usage_csv
from service.web.errors import APIError

DAY = 86400


def test_a_range_rounds_out_to_whole_buckets():
    w = page_window(start_time=DAY + 5, end_time=3 * DAY + 1, width_s=DAY, limit=7,
                    page_start=None)
    assert (w.start, w.end, w.next_start) == (DAY, 4 * DAY, None)
    assert w.bucket_starts(DAY) == [DAY, 2 * DAY, 3 * DAY]


def test_a_page_holds_limit_buckets_then_points_at_the_next():
    first = page_window(start_time=0, end_time=10 * 60, width_s=60, limit=4, page_start=None)
    assert (first.start, first.end, first.next_start) == (0, 240, 240)
    last = page_window(start_time=0, end_time=10 * 60, width_s=60, limit=4, page_start=480)
    assert (last.start, last.end, last.next_start) == (480, 600, None)


def test_cursor_round_trip_and_refusals():
    cursor = encode_cursor(3600)
    assert decode_cursor(cursor, start_time=0, end_time=7200, width_s=3600) == 3600
    for bad in ("3600", "page_!!", "page_" + encode_cursor(30)[5:], encode_cursor(7200)):
        with pytest.raises(BadCursor):
            decode_cursor(bad, start_time=0, end_time=7200, width_s=3600)


def test_query_defaults_and_list_forms():
    q = usage_query(QueryParams("start_time=100&group_by[]=model&group_by=batch,model"),
                    now=1000)
    assert (q.bucket_width, q.limit, q.end_time) == ("1d", None, DAY)  # now's day included
    assert q.group_by == ("batch", "model")  # each once


@pytest.mark.parametrize(("query", "param"), [
    ("", "start_time"), ("start_time=1&start_time=2", "start_time"),
    ("start_time=1&bucket_width=1w", "bucket_width"), ("start_time=1&limit=0", "limit"),
    ("start_time=1&bucket_width=1h&limit=169", "limit"), ("start_time=-1", "start_time"),
    ("start_time=5&end_time=4", "end_time"), ("start_time=1&user_ids=u", "user_ids"),
    ("start_time=999999", "start_time"),  # after now (1000) with no end_time
    ("start_time=1&group_by=" + ",".join(["model"] * 101), "group_by"),
])
def test_query_refusals_name_the_parameter(query: str, param: str):
    with pytest.raises(APIError) as err:
        usage_query(QueryParams(query), now=1000)
    assert (err.value.status, err.value.param) == (400, param)


def test_csv_rows_per_result_with_spreadsheet_formulas_defused():
    page = {"data": [
        {"start_time": 0, "end_time": 60, "results": [
            {"model": "=cmd()", "batch": True, "num_model_requests": 2, "input_tokens": 9,
             "input_cached_tokens": 1, "output_tokens": 3}]},
        {"start_time": 60, "end_time": 120, "results": []}]}
    assert usage_csv(page, ("model", "batch")).splitlines() == [
        "start_time,end_time,start_time_utc,model,batch,num_model_requests,input_tokens,"
        "input_cached_tokens,output_tokens",
        "0,60,1970-01-01T00:00:00Z,'=cmd(),true,2,9,1,3"]


def test_csv_names_the_key_beside_its_id():
    page = {"data": [{"start_time": 0, "end_time": 60, "results": [
        {"api_key_id": "k-1", "api_key_name": "prod", "num_model_requests": 1,
         "input_tokens": 2, "input_cached_tokens": 0, "output_tokens": 3}]}]}
    header, row = usage_csv(page, ("api_key_id",)).splitlines()
    assert header.split(",")[3:5] == ["api_key_id", "api_key_name"]
    assert row.split(",")[3:5] == ["k-1", "prod"]
