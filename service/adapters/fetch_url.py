"""Downloads an adapter archive an admin names by URL into the private staging folder an
upload uses, so that the same checks follow.

Only ``http://`` and ``https://``: the object stores' own schemes (``s3://``) need a client
library this deployment does not install; a presigned HTTPS URL of the object works. The body
is counted as it arrives, never trusted to the ``Content-Length`` (one over the limit is
refused before the body is read; one that undercounts ends the body there, and the cut archive
fails the checks), the whole download has one deadline, and redirects are followed by hand,
only to http(s), a few at most. Any host the API can reach is allowed (an object store is
often on the deployment's private network): only admins register by URL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx

SCHEMES = ("http", "https")
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


class FetchRefused(Exception):
    """The URL or its answer is not an archive this deployment will take; the message says
    why, in words an admin can act on."""


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host, else a refusal naming what is allowed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:  # a malformed host ("http://[x")
        raise FetchRefused("url is not a well-formed URL.") from exc
    if parts.scheme == "s3":
        raise FetchRefused("s3:// URLs are not supported here: give a presigned https:// URL "
                           "of the object instead.")
    if parts.scheme not in SCHEMES or not host:
        raise FetchRefused(f"url must be an http:// or https:// URL of an archive, got "
                           f"{_shown(redacted_url(url))!r}.")
    return url


async def download(url: str, dest: Path, *, max_bytes: int, timeout_s: float) -> int:
    """Write the archive at ``url`` to ``dest``; returns its size in bytes."""
    check_url(url)
    try:
        async with asyncio.timeout(timeout_s):
            async with httpx.AsyncClient(
                    follow_redirects=False, timeout=timeout_s,
                    headers={"Accept-Encoding": "identity"}) as client:
                return await _follow(client, url, dest, max_bytes)
    except TimeoutError as exc:
        raise FetchRefused(f"Downloading the archive took longer than {timeout_s:g} s.") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise FetchRefused(f"Downloading the archive failed: {type(exc).__name__}: "
                           f"{_shown(str(exc))}") from exc


async def _follow(client: httpx.AsyncClient, url: str, dest: Path, max_bytes: int) -> int:
    for _ in range(MAX_REDIRECTS + 1):
        async with client.stream("GET", url) as resp:
            if resp.status_code in _REDIRECTS and "location" in resp.headers:
                # Followed by hand so that a redirect cannot leave http(s) (file:, s3:, ...).
                try:
                    url = check_url(urljoin(url, resp.headers["location"]))
                except (FetchRefused, ValueError) as exc:
                    raise FetchRefused("The URL redirects to a location that is not http(s)."
                                       ) from exc
                continue
            if resp.status_code != 200:
                raise FetchRefused(f"The URL answered HTTP {resp.status_code}, not the archive.")
            return await _save(resp, dest, max_bytes)
    raise FetchRefused(f"The URL redirects more than {MAX_REDIRECTS} times.")


async def _save(resp: httpx.Response, dest: Path, max_bytes: int) -> int:
    too_big = FetchRefused(f"The archive is larger than the adapter size limit "
                           f"({max_bytes} bytes).")
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_big
    written = 0
    with open(dest, "wb") as out:
        async for chunk in resp.aiter_bytes():  # decoded bytes count: no gzip bomb
            written += len(chunk)
            if written > max_bytes:
                raise too_big
            out.write(chunk)
    return written


def redacted_url(url: str) -> str:
    """``url`` without its query, fragment and credentials (a presigned URL's signature)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(malformed)"
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def _shown(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
