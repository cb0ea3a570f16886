"""Time buckets of the usage API (OpenAI's Usage API rules): widths, how many buckets a page
holds, where a range starts and ends, and the opaque page cursor. Pure: no I/O.

Buckets sit on UTC minute, hour or day boundaries: a range's start is rounded down and its end
up to one, so every bucket covers its whole width and the same request always lands in the
same bucket, whichever range asked for it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from dataclasses import dataclass
from typing import Literal

BucketWidth = Literal["1m", "1h", "1d"]


@dataclass(frozen=True, slots=True)
class WidthRule:
    seconds: int
    default_limit: int  # buckets per page when the caller names no limit
    max_limit: int


# OpenAI's defaults and maximums per width.
WIDTHS: dict[str, WidthRule] = {
    "1m": WidthRule(60, 60, 1440),
    "1h": WidthRule(3600, 24, 168),
    "1d": WidthRule(86400, 7, 31),
}
_CURSOR_PREFIX = "page_"


class BadCursor(ValueError):
    """A page cursor this range did not hand out."""


def utc(ts: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


def floor_to(ts: int, width_s: int) -> int:
    return ts - ts % width_s


def ceil_to(ts: int, width_s: int) -> int:
    return -(-ts // width_s) * width_s


@dataclass(frozen=True, slots=True)
class PageWindow:
    """The buckets one page covers, [start, end), and where the next page starts (or None)."""
    start: int
    end: int
    next_start: int | None

    def bucket_starts(self, width_s: int) -> list[int]:
        return list(range(self.start, self.end, width_s))


def page_window(*, start_time: int, end_time: int, width_s: int, limit: int,
                page_start: int | None) -> PageWindow:
    """The page of at most ``limit`` buckets from ``page_start`` (the range's first bucket when
    None) within [start_time, end_time) rounded out to bucket boundaries."""
    first, last = floor_to(start_time, width_s), ceil_to(end_time, width_s)
    start = first if page_start is None else page_start
    end = min(start + limit * width_s, last)
    return PageWindow(start, end, end if end < last else None)


def encode_cursor(bucket_start: int) -> str:
    raw = str(bucket_start).encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, start_time: int, end_time: int, width_s: int) -> int:
    """The bucket start a cursor names; BadCursor unless it is a bucket of this range."""
    if not cursor.startswith(_CURSOR_PREFIX):
        raise BadCursor(cursor)
    body = cursor[len(_CURSOR_PREFIX):]
    try:
        value = int(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("ascii"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor(cursor) from None
    if value % width_s or not floor_to(start_time, width_s) <= value < ceil_to(end_time, width_s):
        raise BadCursor(cursor)
    return value
