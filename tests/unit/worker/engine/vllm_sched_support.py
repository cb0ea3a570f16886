"""Driving vLLM's real scheduler on the CPU without a model (shared by the layer-1 and
realtime-guard tests): a config.json for a tiny Llama is enough for `ModelConfig`, the KV cache
is a bare `KVCacheConfig`, and a fake model step samples one token per request.

Import it after `pytest.importorskip("vllm")`: it imports vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from worker.engine import vllm_guard
from worker.engine.vllm_preempt import GAP_KEY, PreemptiveScheduler

BLOCK = 16
MAX_LEN = 1024
BATCH, FLEX, REALTIME = 3, 2, 0  # Fairway's vLLM priorities (lower runs first)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # ModelConfig only reads config.json: no weights, no tokenizer, no network.
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=MAX_LEN,
    ).save_pretrained(path)
    init_none_hash(sha256)
    return path


MakeSched = Callable[..., Any]


@pytest.fixture
def make_sched(model_dir: Path) -> MakeSched:
    def make(
        cls: type = PreemptiveScheduler,
        max_num_seqs: int = 4,
        num_blocks: int = 400,
        gap: int | None = None,
        guard_chunk: int = 0,
        extra: dict[str, Any] | None = None,  # more VllmConfig.additional_config keys
    ) -> Any:
        sched_cfg = SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=2048,
            max_model_len=MAX_LEN,
            enable_chunked_prefill=True,
            policy="priority",
            is_encoder_decoder=False,
        )
        model_cfg = ModelConfig(
            model=str(model_dir),
            dtype="float32",
            seed=0,
            skip_tokenizer_init=True,
            max_model_len=MAX_LEN,
        )
        cache_cfg = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
        vllm_cfg = VllmConfig(
            scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg
        )
        if gap is not None:
            vllm_cfg.additional_config[GAP_KEY] = gap
        if guard_chunk:
            vllm_cfg.additional_config[vllm_guard.CHUNK_KEY] = guard_chunk
        vllm_cfg.additional_config.update(extra or {})
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
        kv_cfg = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
        )
        cache_cfg.num_gpu_blocks = num_blocks
        return cls(
            vllm_config=vllm_cfg,
            kv_cache_config=kv_cfg,
            structured_output_manager=StructuredOutputManager(vllm_cfg),
            block_size=BLOCK,
            log_stats=True,
        )

    return make


def request(rid: str, priority: int, n: int, arrival: float, max_tokens: int = 200) -> Request:
    seed = sum(map(ord, rid))
    return Request(
        request_id=rid,
        prompt_token_ids=[(seed * 131 + j * 7) % 997 + 1 for j in range(n)],
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        priority=priority,
        arrival_time=arrival,
        block_hasher=get_request_block_hasher(BLOCK, sha256),
    )


def output_for(sched: Any, out: Any) -> ModelRunnerOutput:
    """A fake forward pass: one token for each request whose context is now all computed."""
    ids = list(out.num_scheduled_tokens)
    sampled = [
        [5] if sched.requests[r].num_computed_tokens >= sched.requests[r].num_tokens else []
        for r in ids
    ]
    return ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
    )


def step(sched: Any) -> Any:
    out = sched.schedule()
    sched.update_from_output(out, output_for(sched, out))
    return out


def fill(sched: Any, reqs: list[Request], steps: int = 3) -> None:
    for r in reqs:
        sched.add_request(r)
    for _ in range(steps):
        step(sched)
    assert {r.request_id for r in sched.running} == {r.request_id for r in reqs}


def batch_pool(n: int, prompt: int = 40) -> list[Request]:
    return [request(f"b{i}", BATCH, prompt, arrival=float(i)) for i in range(n)]


def kv_full(make_sched: MakeSched, cls: type) -> Any:
    # 8 slots but 40 blocks (one is vLLM's null block): four 150-token batch requests hold
    # 10 blocks each, so KV, not slots, is what is full.
    sched = make_sched(cls, max_num_seqs=8, num_blocks=40)
    fill(sched, [*batch_pool(3, prompt=150), request("b3", BATCH, 120, arrival=3.0)])
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() < 4
    return sched
