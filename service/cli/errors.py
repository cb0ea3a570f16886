"""The CLI's errors: one line in plain words on stderr and a non-zero exit, never a traceback
(``FAIRWAY_DEBUG=1`` shows the traceback of an unexpected one)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any


class CLIError(Exception):
    """A failure the user can act on; its message is the whole story."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _api_message(body: Any, fallback: str) -> str:
    """The message of an error in OpenAI's shape, else ``fallback``."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return fallback


def describe(exc: BaseException) -> tuple[str, int]:
    """(one line for the user, exit code)."""
    import httpx
    import openai
    import pydantic

    if isinstance(exc, CLIError):
        return str(exc), exc.code
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        url = getattr(getattr(exc, "request", None), "url", None)
        where = f" at {url.scheme}://{url.netloc.decode()}" if url else ""
        return (f"cannot reach the Fairway API{where}: is it running? (start it with "
                "`fairway up`, or pass --base-url)"), 1
    if isinstance(exc, openai.APIStatusError):
        message = _api_message(exc.body, exc.message)
        return _one_line(f"the API refused ({exc.status_code}): {message}"), 1
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}", 1
    if isinstance(exc, OSError) and exc.filename:
        return f"cannot use {exc.filename}: {exc.strerror}", 1
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(exc, pydantic.ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return _one_line(f"invalid settings: {where + ': ' if where else ''}{first['msg']}"), 1
    return _one_line(f"unexpected error: {type(exc).__name__}: {exc} (FAIRWAY_DEBUG=1 shows "
                     "the details)"), 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run_reporting_errors(func: Callable[[], int], prog: str = "fairway") -> int:
    """Run a command; an exception becomes one line on stderr and an exit code."""
    try:
        return func()
    except SystemExit:
        raise
    except BaseException as exc:  # every error ends as one line
        message, code = describe(exc)
        if os.environ.get("FAIRWAY_DEBUG") and not isinstance(exc, CLIError):
            traceback.print_exc()
        print(f"{prog}: error: {message}", file=sys.stderr)
        return code
