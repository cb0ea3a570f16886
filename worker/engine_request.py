"""A claimed job's engine request: its prompt tokens (chat or completion), its sampling, and
its tenant's prefix-cache salt."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Any

from service.store import nul_codec
from service.store.response_status import CHAT_ENDPOINTS
from service.store.settings import Settings
from worker.claimed_job import ClaimedJob
from worker.engine.base import Engine, EngineError, EngineRequest, SamplingSpec
from worker.structured import structured_output

# The request field that holds the prompt, by endpoint (chat: messages).
_PROMPT_PARAM = {"completions": "prompt", "responses": "input"}


def build_engine_request(engine: Engine, job: ClaimedJob, rid: str,
                         max_model_len: int) -> EngineRequest:
    body = nul_codec.decode(job.request)  # stored with U+0000 escaped
    if job.endpoint in CHAT_ENDPOINTS:  # the Responses API stores chat messages too
        prompt_ids = engine.encode_chat([_plain_message(m) for m in body["messages"]])
    else:
        prompt_ids = engine.encode(body["prompt"])
    if len(prompt_ids) + job.max_tokens > max_model_len:
        too_long = EngineError(
            f"This model's maximum context length is {max_model_len} tokens; the prompt has "
            f"{len(prompt_ids)} and max_tokens asks for {job.max_tokens} more.")
        # As OpenAI answers it: the code clients match on, and the field holding the prompt.
        too_long.code = "context_length_exceeded"
        too_long.param = _PROMPT_PARAM.get(job.endpoint, "messages")
        raise too_long
    # A resumed job continues after its checkpoint with what is left of max_tokens.
    prompt_ids = prompt_ids + job.checkpoint
    sampling = SamplingSpec(max_tokens=job.max_tokens - len(job.checkpoint),
                            temperature=float(body.get("temperature", 1.0)),
                            top_p=float(body.get("top_p", 1.0)), seed=body.get("seed"),
                            stop=list(body.get("stop") or []),
                            ignore_eos=bool(body.get("ignore_eos", False)),
                            structured=structured_output(body))
    return EngineRequest(rid, prompt_ids, sampling, priority=job.priority,
                         cache_salt=job.cache_salt)


def tenant_cache_salt(settings: Settings, tenant_id: uuid.UUID) -> str | None:
    """The tenant's prefix-cache namespace: keyed by the deployment's secret, so a salt
    reveals nothing and cannot be guessed from a tenant id."""
    if not settings.engine.tenant_cache_isolation:
        return None
    return hmac.new(settings.secret_key.encode(), tenant_id.bytes,
                    hashlib.sha256).hexdigest()[:32]


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    role = "system" if message["role"] == "developer" else message["role"]
    return {"role": role, "content": content or ""}
