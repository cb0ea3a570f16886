"""Mixed client load for one fault: streamed and non-streamed chat requests of several service
tiers from several tenants (httpx, one request after another per client thread), recording
exactly what each client saw. The batch goes through the openai SDK (``batch_client``)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field

import httpx

from service.cli.chaos.cluster import MODEL

TIERS = ("priority", "default")
HUNG = "transport ReadTimeout"


@dataclass(frozen=True)
class Tenant:
    name: str
    id: str
    key: str


@dataclass(frozen=True)
class LoadPlan:
    streams: int = 6  # concurrent streaming clients
    calls: int = 2  # concurrent non-streaming clients
    stream_max_tokens: int = 64
    call_max_tokens: int = 24
    batch_lines: int = 300
    batch_max_tokens: int = 16
    pause_s: float = 0.2  # between one client's requests
    # Longer than any silence a fault may cause (a final write waits out a Postgres outage):
    # a stream silent for this long was left hanging.
    read_timeout_s: float = 150.0


@dataclass
class StreamRecord:
    tenant: str
    tier: str
    started: float  # time.monotonic()
    ended: float = 0.0
    status: int | None = None
    job_id: str | None = None  # the job's UUID hex (X-Fairway-Job)
    client_port: int | None = None  # its connection's local port: the balancer's session
    text: str = ""
    events: list[float] = field(default_factory=list)  # when each token (and the end) arrived
    finish_reason: str | None = None
    done: bool = False  # [DONE] seen
    error: str | None = None  # what the client was told went wrong, by kind

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None and self.done

    @property
    def silent(self) -> bool:
        """Ended cleanly at the HTTP level, but with neither the answer's end nor an error."""
        return self.status == 200 and self.error is None and not self.finished

    @property
    def hung(self) -> bool:
        """Accepted, then nothing (no token, no end, no error) until the client gave up."""
        return self.status == 200 and self.error == HUNG


@dataclass
class CallRecord:
    tenant: str
    tier: str
    started: float
    ended: float = 0.0
    status: int | None = None
    job_id: str | None = None
    content: str | None = None
    error: str | None = None


class Load:
    """Client threads sending requests until ``stop``; every request's record is kept."""

    def __init__(self, base_url: str, tenants: list[Tenant], plan: LoadPlan, label: str) -> None:
        self.base_url = base_url
        self.tenants = tenants
        self.plan = plan
        self.label = label
        self.streams: list[StreamRecord] = []
        self.calls: list[CallRecord] = []
        self._stop = threading.Event()
        self._seq = itertools.count()
        self._threads = [threading.Thread(target=self._stream_client, args=(i,), daemon=True,
                                          name=f"chaos-stream-{i}") for i in range(plan.streams)]
        self._threads += [threading.Thread(target=self._call_client, args=(i,), daemon=True,
                                           name=f"chaos-call-{i}") for i in range(plan.calls)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 240.0) -> None:
        """No new requests; waits for those in flight to end."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))

    # -- clients -------------------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(
            connect=5.0, read=self.plan.read_timeout_s, write=10.0, pool=10.0))

    def _body(self, i: int, max_tokens: int, tier: str, stream: bool) -> dict[str, object]:
        n = next(self._seq)
        return {"model": MODEL, "stream": stream, "max_tokens": max_tokens, "temperature": 0,
                "service_tier": tier,
                "messages": [{"role": "user",
                              "content": f"{self.label} request {n}: tell me a story"}]}

    def _stream_client(self, i: int) -> None:
        with self._http() as http:
            for n in itertools.count():
                if self._stop.is_set():
                    return
                tenant = self.tenants[(i + n) % len(self.tenants)]
                tier = TIERS[(i + n) % len(TIERS)]
                record = StreamRecord(tenant.name, tier, time.monotonic())
                self.streams.append(record)
                _stream_once(http, tenant, self._body(i, self.plan.stream_max_tokens, tier,
                                                      True), record)
                record.ended = time.monotonic()
                self._stop.wait(self.plan.pause_s)

    def _call_client(self, i: int) -> None:
        with self._http() as http:
            for n in itertools.count():
                if self._stop.is_set():
                    return
                tenant = self.tenants[(i + n + 1) % len(self.tenants)]
                tier = TIERS[(i + n) % len(TIERS)]
                record = CallRecord(tenant.name, tier, time.monotonic())
                self.calls.append(record)
                _call_once(http, tenant, self._body(i, self.plan.call_max_tokens, tier, False),
                           record)
                record.ended = time.monotonic()
                self._stop.wait(self.plan.pause_s)


def _client_port(resp: httpx.Response) -> int | None:
    """The local port of the connection that carried ``resp`` (None where unreadable)."""
    stream = resp.extensions.get("network_stream")
    address = stream.get_extra_info("client_addr") if stream is not None else None
    return int(address[1]) if isinstance(address, tuple) and len(address) >= 2 else None


def _auth(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.key}"}


def _stream_once(http: httpx.Client, tenant: Tenant, body: dict[str, object],
                 record: StreamRecord) -> None:
    try:
        with http.stream("POST", "/v1/chat/completions", json=body,
                         headers=_auth(tenant)) as resp:
            record.status = resp.status_code
            record.job_id = _job_hex(resp.headers.get("x-fairway-job"))
            record.client_port = _client_port(resp)
            if resp.status_code != 200:
                resp.read()
                record.error = f"{resp.status_code} {_error_code(resp.text)}"
                return
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    record.done = True
                    continue
                event = json.loads(data)
                if "error" in event:
                    record.events.append(time.monotonic())
                    record.error = f"stream {event['error'].get('code') or 'error'}"
                    continue
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                    if piece or choice.get("finish_reason"):
                        record.events.append(time.monotonic())
                    record.text += piece
                    record.finish_reason = choice.get("finish_reason") or record.finish_reason
    except httpx.HTTPError as exc:
        record.error = f"transport {type(exc).__name__}"
    except ValueError as exc:  # a data line that is not JSON
        record.error = f"garbled {type(exc).__name__}"


def _call_once(http: httpx.Client, tenant: Tenant, body: dict[str, object],
               record: CallRecord) -> None:
    try:
        resp = http.post("/v1/chat/completions", json=body, headers=_auth(tenant))
    except httpx.HTTPError as exc:
        record.error = f"transport {type(exc).__name__}"
        return
    record.status = resp.status_code
    if resp.status_code != 200:
        record.error = f"{resp.status_code} {_error_code(resp.text)}"
        return
    try:
        payload = resp.json()
        record.job_id = _job_hex(payload["id"])
        record.content = payload["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        record.error = f"garbled {type(exc).__name__}"


def _job_hex(public_id: str | None) -> str | None:
    """job_<hex>, chatcmpl-<hex> -> <hex>."""
    if not public_id:
        return None
    return public_id.rsplit("_", 1)[-1].rsplit("-", 1)[-1]


def _error_code(text: str) -> str:
    try:
        error = json.loads(text).get("error") or {}
        return str(error.get("code") or error.get("type") or "error")
    except (ValueError, AttributeError):
        return "unparsed"
