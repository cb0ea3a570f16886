"""Lists a person reads in a terminal: aligned columns under a header, times at a glance."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


def when(epoch: int | None, now: float) -> str:
    """Local clock time and how long ago."""
    if not epoch:
        return "-"
    ago = max(0, int(now - epoch))
    if ago < 60:
        rel = f"{ago}s ago"
    elif ago < 3600:
        rel = f"{ago // 60}m ago"
    elif ago < 86400:
        rel = f"{ago // 3600}h ago"
    else:
        rel = f"{ago // 86400}d ago"
    stamp = dt.datetime.fromtimestamp(epoch).astimezone()
    return f"{stamp:%Y-%m-%d %H:%M} ({rel})"


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, empty: str) -> None:
    """The rows under the header, or ``empty`` (a sentence saying what to do) when none."""
    if not rows:
        print(empty)
        return
    table = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
