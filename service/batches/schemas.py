"""The POST /v1/batches body and the completion windows a deployment accepts."""

from __future__ import annotations

import datetime as dt
import re

from pydantic import ConfigDict, Field, field_validator

from service.batches.validation import ENDPOINTS
from service.store.storable import StorableModel

_WINDOW = re.compile(r"^(\d{1,6})([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(value: str) -> dt.timedelta | None:
    """'24h' -> 24 hours; '30s', '5m', '2d' likewise. None if malformed."""
    match = _WINDOW.match(value.strip())
    if not match or int(match.group(1)) == 0:
        return None
    return dt.timedelta(seconds=int(match.group(1)) * _UNIT_S[match.group(2)])


def allowed_windows(setting: str) -> dict[str, dt.timedelta]:
    """Parse Settings.batch_completion_windows ("24h,30s"); malformed entries are skipped."""
    out = {}
    for item in setting.split(","):
        if (window := parse_window(item)) is not None:
            out[item.strip()] = window
    return out


class BatchCreate(StorableModel):
    model_config = ConfigDict(extra="ignore")

    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    # OpenAI's optional output_expires_after is accepted and ignored (files do not expire).

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if value not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {sorted(ENDPOINTS)}")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > 16:
            raise ValueError("metadata takes at most 16 pairs")
        if any(len(k) > 64 or len(v) > 512 for k, v in value.items()):
            raise ValueError("metadata keys are at most 64 characters, values at most 512")
        return value
