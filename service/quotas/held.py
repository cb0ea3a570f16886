"""What a request holds of a limit (the tenant's reservation, a key's hold) is given back when
its work ends: after a waited answer, or when a streamed one stops, however it stops."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from service.store.detached import run_detached

T = TypeVar("T")
Release = Callable[[], Coroutine[Any, Any, None]]


async def release_after(work: Awaitable[T], release: Release) -> T:
    try:
        return await work
    finally:
        await release()


async def release_when_done(stream: AsyncIterator[bytes], release: Release
                            ) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        # This generator may be mid-cancellation (client gone): release detached.
        run_detached(release())
