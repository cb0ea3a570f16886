"""The most recent refusals (429s from quotas, the SLO gate and batch admission) this process
answered, for the admin dashboard's "recent 429s". In memory, per API process: the metrics
count them for good (fairway_rejections_total); this keeps the last few with their time."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

_RECENT: deque[tuple[float, str, str]] = deque(maxlen=500)


def note(tenant: object, reason: str) -> None:
    _RECENT.append((time.time(), str(tenant), reason))


def recent(*, since: float) -> list[dict[str, Any]]:
    """Newest first: {"at": epoch seconds, "tenant_id", "reason"} at or after `since`."""
    return [{"at": at, "tenant_id": tenant, "reason": reason}
            for at, tenant, reason in reversed(_RECENT) if at >= since]
