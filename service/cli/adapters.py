"""`fairway adapter upload|list|register|delete`: a tenant's LoRA adapters. `upload`, `list`
and `delete` go through the API with the tenant's key; `upload` takes the folder PEFT's
``save_pretrained`` writes (or a zip or tar of it) and prints the model name to use:
``ft:<base>:<tenant>:<name>``. `register` is the admin's: a folder already on the API's host,
under its import directory, or an http(s) URL of an archive the API downloads."""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import httpx

from service.cli.errors import CLIError
from service.cli.table import print_table
from service.cli.target import AdminClient, api_key, api_root

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def add_parser(sub: Any) -> None:
    adapter = sub.add_parser("adapter", help="your LoRA adapters (fine-tunes)").add_subparsers(
        dest="sub", required=True, metavar="{upload,list,register,delete}")
    up = adapter.add_parser("upload", help="upload a PEFT LoRA adapter")
    up.add_argument("path", type=Path,
                    help="the adapter folder (adapter_config.json and "
                         "adapter_model.safetensors), or a zip or tar of it")
    up.add_argument("--name", required=True, help="its name: a-z, 0-9, '.', '_', '-'")
    up.add_argument("--model", required=True, help="the base model it was trained on")
    up.set_defaults(func=cmd_upload)
    adapter.add_parser("list", help="list your adapters").set_defaults(func=cmd_list)
    reg = adapter.add_parser("register", help="admin: register a tenant's adapter from a "
                                              "folder under FAIRWAY_ADAPTER_IMPORT_DIR or an "
                                              "http(s) URL of its archive")
    reg.add_argument("path", nargs="?",
                     help="the folder, relative to the API host's import directory")
    reg.add_argument("--url", help="instead of a path: an http(s) URL of the adapter's zip or "
                                   "tar (the API downloads it)")
    reg.add_argument("--tenant", required=True, help="the tenant's name")
    reg.add_argument("--name", required=True, help="its name: a-z, 0-9, '.', '_', '-'")
    reg.add_argument("--model", required=True, help="the base model it was trained on")
    reg.set_defaults(func=cmd_register)
    rm = adapter.add_parser("delete", help="delete an adapter")
    rm.add_argument("adapter", help="its id (lora-...) or model name (ft:...)")
    rm.set_defaults(func=cmd_delete)


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    root = api_root(args)
    try:
        resp = httpx.request(method, root + path, timeout=600, headers={
            "Authorization": f"Bearer {api_key(args)}"}, **kwargs)
    except httpx.HTTPError as exc:
        raise CLIError(f"cannot reach the API at {root}: {exc}") from exc
    if resp.status_code >= 400:
        try:
            message = resp.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = resp.text[:200] or resp.reason_phrase
        raise CLIError(f"the API refused ({resp.status_code}): {message}")
    return resp.json()


def archive_of(path: Path) -> tuple[str, bytes]:
    """The upload: a folder is zipped (its two adapter files); a file is sent as it is."""
    if path.is_dir():
        missing = [n for n in ADAPTER_FILES if not (path / n).is_file()]
        if missing:
            raise CLIError(f"{path} lacks {', '.join(missing)}")
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for name in ADAPTER_FILES:
                zf.write(path / name, name)
        return path.name + ".zip", buf.getvalue()
    if not path.is_file():
        raise CLIError(f"no such file or folder: {path}")
    return path.name, path.read_bytes()


def cmd_upload(args: argparse.Namespace) -> int:
    filename, data = archive_of(args.path)
    adapter = _call(args, "POST", "/v1/adapters", data={"name": args.name, "model": args.model},
                    files={"file": (filename, data, "application/octet-stream")})
    print(json.dumps(adapter, indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = _call(args, "GET", "/v1/adapters")["data"]
    print_table(("ID", "MODEL", "RANK", "MODULES", "BYTES"),
                [(a["id"], a["model"], str(a["rank"]), ",".join(a["target_modules"]),
                  str(a["bytes"])) for a in rows],
                empty="No adapters: upload one with `fairway adapter upload`.")
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.url is None):
        raise CLIError("give the adapter's folder or --url, one of them")
    source = {"url": args.url} if args.url is not None else {"path": args.path}
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    adapter = admin.call("POST", f"/admin/tenants/{tenant['id']}/adapters",
                         json={"name": args.name, "model": args.model, **source})
    print(json.dumps(adapter, indent=2))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    gone = _call(args, "DELETE", f"/v1/adapters/{args.adapter}")
    print(f"deleted {gone['id']}")
    return 0
