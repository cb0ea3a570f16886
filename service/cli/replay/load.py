"""The load generator: sends a replay plan to an OpenAI-compatible server on the plan's clock
and records what came back. Realtime requests stream (`/v1/completions`, ``ignore_eos`` so
the trace's output length is produced); batch files go through the Files and Batches APIs on
Fairway, and as low-priority requests, all at once, on a bare vLLM server (it has no Batch
API)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from service.cli.replay.plan import BatchFile, Plan, Request, prompt_text

TERMINAL = {"completed", "failed", "expired", "cancelled"}
CANCEL_GRACE_S = 10.0


@dataclass(frozen=True)
class Target:
    """Where the plan goes. ``keys``: each tenant's API key (Fairway); ``priority``: send each
    request's vLLM priority (a bare server run with ``--scheduling-policy priority``)."""

    name: str
    base_url: str  # the root, without /v1
    model: str
    keys: dict[str, str] = field(default_factory=dict)
    fairway: bool = True
    priority: bool = False


@dataclass
class RealtimeOutcome:
    request: Request
    status: str = "unfinished"  # ok, refused (429), error, unfinished (the run ended first)
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    error: str = ""


@dataclass
class BatchOutcome:
    file: BatchFile
    status: str = "unfinished"  # the batch's last status (Fairway), completed or unfinished
    lines_done: int = 0
    output_tokens: int = 0
    done_s: float | None = None  # replay clock when it ended
    error: str = ""


@dataclass
class Outcomes:
    target: str
    realtime: list[RealtimeOutcome]
    batches: list[BatchOutcome]
    duration_s: float  # the plan's arrival span
    wall_s: float  # until the last request or batch ended (or the drain deadline)


def completion_body(target: Target, req: Request, *, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": target.model, "prompt": prompt_text(req.index,
                            req.prompt_tokens), "max_tokens": req.output_tokens,
                            "temperature": 0, "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if target.fairway and not req.entry.batch:
        body["service_tier"] = req.entry.service_tier
    if target.priority:
        body["priority"] = req.entry.priority
    return body


def _headers(target: Target, tenant: str) -> dict[str, str]:
    key = target.keys.get(tenant)
    return {"Authorization": f"Bearer {key}"} if key else {}


async def _stream_one(http: httpx.AsyncClient, target: Target, out: RealtimeOutcome,
                      t0: float) -> None:
    req = out.request
    await asyncio.sleep(max(0.0, t0 + req.at - time.perf_counter()))
    sent = time.perf_counter()
    chunks = 0
    try:
        async with http.stream("POST", "/v1/completions", headers=_headers(target,
                               req.entry.tenant), json=completion_body(target, req,
                               stream=True)) as resp:
            if resp.status_code != 200:
                out.status = "refused" if resp.status_code == 429 else "error"
                out.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                return
            async for line in resp.aiter_lines():
                data = line.removeprefix("data: ").strip()
                if not data.startswith("{"):
                    continue
                chunk = json.loads(data)
                if "error" in chunk:  # a refusal after the headers (the SLO gate) counts as one
                    refused = (chunk["error"] or {}).get("type") == "rate_limit_error"
                    out.status = "refused" if refused else "error"
                    out.error = str(chunk["error"])[:200]
                    return
                if chunk.get("usage"):
                    out.output_tokens = int(chunk["usage"].get("completion_tokens") or 0)
                choices = chunk.get("choices") or [{}]
                if choices[0].get("text"):
                    chunks += 1
                    if out.ttft_s is None:
                        out.ttft_s = time.perf_counter() - sent
        out.e2e_s = time.perf_counter() - sent
        out.output_tokens = out.output_tokens or chunks
        out.status = "ok"
    except httpx.HTTPError as exc:
        out.status, out.error = "error", f"{type(exc).__name__}: {exc}"[:200]


async def _fairway_batch(http: httpx.AsyncClient, target: Target, out: BatchOutcome,
                         t0: float, deadline: float) -> None:
    f = out.file
    await asyncio.sleep(max(0.0, t0 + f.at - time.perf_counter()))
    headers = _headers(target, f.tenant)
    lines = "".join(json.dumps({"custom_id": f"r{r.index}", "method": "POST",
                                "url": "/v1/completions",
                                "body": completion_body(target, r, stream=False)}) + "\n"
                    for r in f.lines)
    try:
        up = await http.post("/v1/files", headers=headers, data={"purpose": "batch"},
                             files={"file": (f"replay-{f.lines[0].index}.jsonl", lines)})
        up.raise_for_status()
        made = await http.post("/v1/batches", headers=headers, json={
            "input_file_id": up.json()["id"], "endpoint": "/v1/completions",
            "completion_window": "24h"})
        made.raise_for_status()
        batch = made.json()
        while batch["status"] not in TERMINAL and time.perf_counter() < deadline:
            await asyncio.sleep(0.5)
            got = await http.get(f"/v1/batches/{batch['id']}", headers=headers)
            got.raise_for_status()
            batch = got.json()
        out.status = batch["status"]
        out.lines_done = int((batch.get("request_counts") or {}).get("completed") or 0)
        if batch["status"] in TERMINAL:
            out.done_s = time.perf_counter() - t0
        else:  # leave nothing running behind the replay
            await http.post(f"/v1/batches/{batch['id']}/cancel", headers=headers)
        if batch.get("output_file_id"):
            content = await http.get(f"/v1/files/{batch['output_file_id']}/content",
                                     headers=headers)
            out.output_tokens = sum(_line_tokens(x) for x in content.text.splitlines())
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:200]


def _line_tokens(line: str) -> int:
    if not line.strip():
        return 0
    resp = json.loads(line).get("response") or {}
    if resp.get("status_code") != 200:
        return 0
    return int(((resp.get("body") or {}).get("usage") or {}).get("completion_tokens") or 0)


async def _vllm_batch(http: httpx.AsyncClient, target: Target, out: BatchOutcome,
                      t0: float) -> None:
    """A batch file's lines as plain requests, all sent at the file's time."""
    await asyncio.sleep(max(0.0, t0 + out.file.at - time.perf_counter()))

    async def line(r: Request) -> None:
        try:
            resp = await http.post("/v1/completions", json=completion_body(target, r,
                                                                           stream=False))
            if resp.status_code == 200:
                out.lines_done += 1
                out.output_tokens += int(resp.json()["usage"]["completion_tokens"])
            else:
                out.error = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            out.error = f"{type(exc).__name__}: {exc}"[:200]

    await asyncio.gather(*(line(r) for r in out.file.lines))
    out.status = "completed" if out.lines_done == len(out.file.lines) else "failed"
    out.done_s = time.perf_counter() - t0


async def replay(plan: Plan, target: Target, *, drain_s: float = 120.0) -> Outcomes:
    """Sends the plan; waits for everything until ``drain_s`` past the last arrival, then
    stops what is still running (unfinished)."""
    realtime = [RealtimeOutcome(r) for r in plan.realtime]
    batches = [BatchOutcome(f) for f in plan.batches]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=target.base_url, limits=limits,
                                 timeout=httpx.Timeout(None, connect=30)) as http:
        t0 = time.perf_counter()
        deadline = t0 + plan.duration_s + drain_s
        tasks = [asyncio.create_task(_stream_one(http, target, o, t0)) for o in realtime]
        for b in batches:
            tasks.append(asyncio.create_task(
                _fairway_batch(http, target, b, t0, deadline) if target.fairway
                else _vllm_batch(http, target, b, t0)))
        # A little past the deadline: a batch still open then is cancelled by its own task.
        _, pending = await asyncio.wait(
            tasks, timeout=max(0.0, deadline + CANCEL_GRACE_S - time.perf_counter()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall = time.perf_counter() - t0
    return Outcomes(target.name, realtime, batches, plan.duration_s, wall)


def warm_up(target: Target) -> None:
    """One short request (the first one pays for lazy start-up), through the first tenant's
    key; raises on an error answer, so a wrong key or model stops the replay before it
    starts."""
    tenant = next(iter(target.keys), "")
    body = {"model": target.model, "prompt": "Say hello.", "max_tokens": 4,
            "temperature": 0, "ignore_eos": True}
    resp = httpx.post(target.base_url + "/v1/completions", json=body,
                      headers=_headers(target, tenant), timeout=300)
    if resp.status_code != 200:
        raise RuntimeError(f"warm-up on {target.name} got HTTP {resp.status_code}: "
                           f"{resp.text[:300]}")
