"""Which Fairway a command talks to, and with which credential: the global options first,
then the environment (OPENAI_BASE_URL, OPENAI_API_KEY, FAIRWAY_ADMIN_TOKEN), then the stack
`fairway up` runs from the data directory (its state file), then the configured API address.
So right after `fairway up` every command works with no environment variables."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import httpx

from service.cli.errors import CLIError
from service.cli.state import DEMO_KEY_FILE, StackState, read_text, running_stack
from service.store.settings import ApiSettings, Settings


def data_dir(args: argparse.Namespace) -> Path:
    if getattr(args, "data_dir", None):
        return Path(args.data_dir).expanduser()
    return Settings().data_dir


def _stack(args: argparse.Namespace) -> StackState | None:
    return running_stack(data_dir(args))


def api_root(args: argparse.Namespace) -> str:
    """The API's root URL (no /v1)."""
    given = getattr(args, "base_url", None) or os.environ.get("OPENAI_BASE_URL")
    if given:
        root = given.rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root
    stack = _stack(args)
    if stack is not None:
        return stack.api_url
    api = ApiSettings()
    return f"http://{api.host}:{api.port}"


def api_key(args: argparse.Namespace) -> str:
    key = getattr(args, "api_key", None) or os.environ.get("OPENAI_API_KEY")
    if not key and _stack(args) is not None:
        key = read_text(data_dir(args) / DEMO_KEY_FILE)
    if not key:
        raise CLIError("no API key: pass --api-key or set OPENAI_API_KEY (or start the stack "
                       "with `fairway up`, whose demo key is used by default)")
    return key


def admin_token(args: argparse.Namespace) -> str:
    token = getattr(args, "admin_token", None) or os.environ.get("FAIRWAY_ADMIN_TOKEN")
    if token:
        return token
    stack = _stack(args)
    return stack.admin_token if stack is not None else Settings().admin_token


def openai_client(args: argparse.Namespace) -> Any:
    import openai

    return openai.OpenAI(base_url=api_root(args) + "/v1", api_key=api_key(args),
                         max_retries=2, timeout=600)


class AdminClient:
    """The admin API, as the CLI's actor ("admin:cli" in the audit log); an error answer
    becomes a CLIError with the server's message."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.root = api_root(args)
        self.http = httpx.Client(base_url=self.root, timeout=30, headers={
            "Authorization": f"Bearer {admin_token(args)}", "X-Fairway-Actor": "cli"})

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self.http.request(method, path, **kwargs)
        if resp.status_code == 403:
            raise CLIError(f"the API at {self.root} refused the admin token; pass "
                           "--admin-token or set FAIRWAY_ADMIN_TOKEN")
        if resp.status_code >= 400:
            try:
                body = resp.json()
                message = body["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = resp.text[:200] or resp.reason_phrase
            raise CLIError(f"the API refused ({resp.status_code}): {message}")
        return resp.json()

    def tenant_by_name(self, name: str) -> dict[str, Any]:
        for tenant in self.call("GET", "/admin/tenants")["data"]:
            if tenant["name"] == name:
                return dict(tenant)
        raise CLIError(f"no tenant named {name!r} (see `fairway tenant list`)")
