"""Measure an engine step's cost terms (scheduler.cost_model.CostModel) on this GPU, and set
them against a profile's (default ``h200-llama3-8b``, a roofline estimate from datasheets).

    python bench/gpu_step_costs.py [--shape llama3-8b|tiny] [--device cuda|cpu]
                                   [--profile h200-llama3-8b] [--out FILE.json]

What runs: a decoder with Llama-3.1-8B's shapes (32 layers, hidden 4096, 32 query and 8 KV
heads of 128, MLP 14336, vocabulary 128256) in plain PyTorch, with random BF16 weights, so
nothing is downloaded and no vLLM is needed (a GPU host without the ``vllm`` package can run
it). Each layer is what an engine's forward does per token: RMSNorm, the fused QKV
projection, rotary embeddings, attention (``scaled_dot_product_attention``: causal over the
chunk for prefill; for decode each sequence's query against its own KV cache, one cache per
layer, 128 KiB per token in all, the new token's K and V written in), the output projection,
and the SiLU-gated MLP; then the LM head and a greedy pick for each sequence's last token.

- Decode steps at a grid of batch sizes x context lengths, replayed as CUDA graphs (vLLM
  captures its decode steps in graphs too) and, at two points, eagerly, to show what
  launching costs. Fit: ``step_s = base + per_seq * batch + per_ctx * (batch * context)``.
- Prefill chunks (the steps of chunked prefill), packed 512-token prompts up to the token
  budget, eager. Fit: ``base + per_token * tokens``. One long prompt shows attention's
  quadratic part, which the linear model leaves out.
- The host link, for swap: pinned host memory <-> the GPU, one large copy each way, and
  KV-block-sized copies (64 KiB) one after another. ``swap_per_token_s`` = KV bytes per token
  / the large copy's bandwidth, one way.
- Ceilings, to read the rest against: a bf16 8192^3 matrix product and a device-to-device copy.

This is not vLLM: no paged-attention kernels, no fused norms or activations, no scheduler or
sampler on the CPU side between steps. Its step times are what the model's arithmetic and
memory traffic cost with stock kernels; a real engine's steps add its own per-step overhead
(scheduling, input preparation), which ``base`` here leaves out. Timings are CUDA-event medians.
``--shape tiny --device cpu`` runs every step at toy sizes, as a smoke test without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from scheduler.cost_model import CostModel
from scheduler.cost_profiles import profile as cost_profile


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    # The grids: (batch, context) decode points, (prompts, prompt length) prefill chunks,
    # (batch, context, prefill chunk) mixed steps.
    decode_points: tuple[tuple[int, int], ...]
    prefill_points: tuple[tuple[int, int], ...]
    mixed_points: tuple[tuple[int, int, int], ...]
    swap_bytes: int

    @property
    def kv_bytes_per_token(self) -> int:  # K and V, every layer, BF16
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


_DECODE_GRID = (*((b, c) for b in (1, 8, 32, 64, 128, 256) for c in (256, 1024)),
                (32, 4096), (8, 8192))
_PREFILL_GRID = ((1, 512), (4, 512), (8, 512), (16, 512), (1, 2048), (1, 8192))
# 480: the realtime guard's chunk on the H200 profile; 256 + 7936: a full 8192-token budget.
_MIXED_GRID = ((64, 1024, 480), (64, 1024, 2048), (128, 1024, 4096), (256, 256, 7936))
SHAPES = {
    # Llama-3.1-8B's config.json; the grid stays within 256 x 1024 context tokens (32 GiB KV).
    "llama3-8b": Shape(32, 4096, 32, 8, 128, 14336, 128256, _DECODE_GRID, _PREFILL_GRID,
                       _MIXED_GRID, swap_bytes=2 << 30),
    # SmolLM2-135M-Instruct's config.json: the model bench/gpu_check.sh runs by default.
    "smollm2-135m": Shape(30, 576, 9, 3, 64, 1536, 49152, _DECODE_GRID, _PREFILL_GRID,
                          _MIXED_GRID, swap_bytes=2 << 30),
    "tiny": Shape(2, 256, 4, 2, 64, 512, 1000, ((1, 64), (4, 64), (8, 128), (2, 256)),
                  ((1, 64), (4, 64), (8, 64), (1, 256)), ((4, 64, 32), (2, 256, 64)),
                  swap_bytes=8 << 20),
}


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    """The parts joined along the token dimension, without a copy when there is one."""
    return torch.cat(parts) if len(parts) > 1 else parts[0]


class Decoder:
    """Random-weight decoder with the shape's dimensions; BF16 on CUDA, float32 on CPU."""

    def __init__(self, shape: Shape, device: torch.device, max_kv_tokens: int) -> None:
        self.s = shape
        self.device = device
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        h, d = shape.hidden, shape.head_dim
        qkv_out = (shape.heads + 2 * shape.kv_heads) * d

        def weight(*dims: int) -> torch.Tensor:
            return torch.randn(*dims, device=device, dtype=self.dtype) * 0.02

        self.embed = weight(shape.vocab, h)
        self.lm_head = weight(h, shape.vocab)
        self.final_norm = torch.ones(h, device=device, dtype=self.dtype)
        self.layers = [dict(norm1=torch.ones(h, device=device, dtype=self.dtype),
                            wqkv=weight(h, qkv_out), wo=weight(shape.heads * d, h),
                            norm2=torch.ones(h, device=device, dtype=self.dtype),
                            w_gate_up=weight(h, 2 * shape.intermediate),
                            w_down=weight(shape.intermediate, h))
                       for _ in range(shape.layers)]
        # One K and one V buffer per layer, viewed as [batch, kv_heads, context, head_dim].
        per_layer = max_kv_tokens * shape.kv_heads * d
        self.kv = [torch.zeros(2, per_layer, device=device, dtype=self.dtype)
                   for _ in range(shape.layers)]
        max_pos = 8192 * 2
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(max_pos, device=device, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-5)).to(self.dtype) * w

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [..., seq, heads, head_dim]; pos [seq] positions
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _mlp(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        gate, up = (self._norm(x, layer["norm2"]) @ layer["w_gate_up"]).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ layer["w_down"]

    def _split_qkv(self, x: torch.Tensor, layer: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.s
        qkv = self._norm(x, layer["norm1"]) @ layer["wqkv"]
        q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim,
                             s.kv_heads * s.head_dim], dim=-1)
        t = x.shape[0]
        return (q.view(t, s.heads, s.head_dim), k.view(t, s.kv_heads, s.head_dim),
                v.view(t, s.kv_heads, s.head_dim))

    def _logits_pick(self, last: torch.Tensor) -> torch.Tensor:
        return (self._norm(last, self.final_norm) @ self.lm_head).argmax(-1)

    def step(self, decode: torch.Tensor | None, context: int,
             prefill: torch.Tensor | None) -> torch.Tensor:
        """One engine step over one flat batch of tokens, as vLLM runs a mixed step: every
        projection and the MLP take all tokens at once, attention splits them.

        ``decode`` [batch]: sequences each one token forward at ``context`` tokens of KV (the
        new token's K and V written into the cache). ``prefill`` [prompts, length]: a chunk of
        chunked prefill, causal within each prompt. Returns each sequence's greedy pick."""
        s = self.s
        b = 0 if decode is None else decode.shape[0]
        parts = [] if decode is None else [self.embed[decode]]
        n, length = (0, 0) if prefill is None else prefill.shape
        if prefill is not None:
            parts.append(self.embed[prefill.reshape(-1)])
        x = _cat(parts)  # [tokens, hidden]
        decode_pos = torch.full((1,), max(context - 1, 0), device=self.device, dtype=torch.long)
        prefill_pos = torch.arange(length, device=self.device)
        for layer, kv in zip(self.layers, self.kv, strict=True):
            q, k, v = self._split_qkv(x, layer)  # [tokens, heads, head_dim]
            outs = []
            if b:
                outs.append(self._decode_attention(q[:b], k[:b], v[:b], kv, context,
                                                   decode_pos))
            if n:
                outs.append(self._prefill_attention(q[b:], k[b:], v[b:], n, length,
                                                    prefill_pos))
            attn = _cat(outs)
            x = self._mlp(x + attn @ layer["wo"], layer)
        last = [x[:b]] if b else []
        if n:
            last.append(x[b:].view(n, length, s.hidden)[:, -1])
        return self._logits_pick(_cat(last))

    def _decode_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          kv: torch.Tensor, context: int, pos: torch.Tensor) -> torch.Tensor:
        s = self.s
        b = q.shape[0]
        cache = kv[:, :b * s.kv_heads * context * s.head_dim].view(
            2, b, s.kv_heads, context, s.head_dim)
        q, k = self._rope(q, pos), self._rope(k, pos)
        cache[0, :, :, context - 1] = k
        cache[1, :, :, context - 1] = v
        # Each KV head's query group stands as a short query sequence: no mask needed, the
        # token attends to its whole context.
        qg = q.view(b, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
        out = F.scaled_dot_product_attention(qg, cache[0], cache[1])
        return out.reshape(b, s.heads * s.head_dim)

    def _prefill_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           n: int, length: int, pos: torch.Tensor) -> torch.Tensor:
        s = self.s
        q = self._rope(q.view(n, length, s.heads, s.head_dim), pos).transpose(1, 2)
        k = self._rope(k.view(n, length, s.kv_heads, s.head_dim), pos).transpose(1, 2)
        v = v.view(n, length, s.kv_heads, s.head_dim).transpose(1, 2)
        # The query heads share KV heads in groups (GQA).
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.transpose(1, 2).reshape(n * length, s.heads * s.head_dim)


class Timer:
    """Medians of repeated runs: CUDA events on a GPU, the wall clock on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def median_s(self, fn: Callable[[], Any], reps: int, warmup: int = 2) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1000)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def graphed(fn: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    """``fn`` captured in a CUDA graph (warmed on a side stream first, as PyTorch asks)."""
    if device.type != "cuda":
        return fn
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def fit(rows: list[list[float]], times: list[float]) -> list[float]:
    coef, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array(times), rcond=None)
    return [float(c) for c in coef]


def measure_decode(model: Decoder, timer: Timer, device: torch.device) -> dict[str, Any]:
    points = []
    for b, c in model.s.decode_points:
        tokens = torch.randint(0, model.s.vocab, (b,), device=device)
        step = graphed(lambda tokens=tokens, c=c: model.step(tokens, c, None), device)
        points.append({"batch": b, "context": c, "graphed_s": timer.median_s(step, reps=20)})
        print(f"  decode batch {b:>4} context {c:>5}: {points[-1]['graphed_s'] * 1e3:8.3f} ms",
              flush=True)
    eager = []  # the smallest and the largest step, to show what launching costs
    largest = max(model.s.decode_points, key=lambda point: point[0] * point[1])
    for b, c in (model.s.decode_points[0], largest):
        tokens = torch.randint(0, model.s.vocab, (b,), device=device)
        eager.append({"batch": b, "context": c, "eager_s": timer.median_s(
            lambda tokens=tokens, c=c: model.step(tokens, c, None), reps=10)})
    base, per_seq, per_ctx = fit([[1, p["batch"], p["batch"] * p["context"]] for p in points],
                                 [p["graphed_s"] for p in points])
    return {"points": points, "eager": eager,
            "fit": {"step_base_s": base, "decode_per_seq_s": per_seq,
                    "decode_per_ctx_token_s": per_ctx}}


def measure_prefill(model: Decoder, timer: Timer, device: torch.device) -> dict[str, Any]:
    """Chunks graphed (as the decode steps are) and eager: small chunks are launch-bound."""
    points = []
    for n, length in model.s.prefill_points:
        tokens = torch.randint(0, model.s.vocab, (n, length), device=device)
        chunk = lambda tokens=tokens: model.step(None, 0, tokens)  # noqa: E731
        points.append({"prompts": n, "length": length, "tokens": n * length,
                       "s": timer.median_s(graphed(chunk, device), reps=5),
                       "eager_s": timer.median_s(chunk, reps=5)})
        print(f"  prefill {n:>2} x {length:>5} tokens: {points[-1]['s'] * 1e3:8.2f} ms "
              f"(eager {points[-1]['eager_s'] * 1e3:.2f})", flush=True)
    packed = [p for p in points if p["length"] == model.s.prefill_points[0][1]]
    base, per_token = fit([[1, p["tokens"]] for p in packed], [p["s"] for p in packed])
    return {"points": points, "fit": {"step_base_s": base, "prefill_per_token_s": per_token}}


def measure_mixed(model: Decoder, timer: Timer, device: torch.device) -> list[dict[str, Any]]:
    """Decode and a prefill chunk in one step: the linear model says they add, with one base."""
    points = []
    for b, c, chunk in model.s.mixed_points:
        decode = torch.randint(0, model.s.vocab, (b,), device=device)
        prompt = torch.randint(0, model.s.vocab, (1, chunk), device=device)
        step = graphed(lambda d=decode, c=c, p=prompt: model.step(d, c, p), device)
        points.append({"batch": b, "context": c, "prefill": chunk,
                       "s": timer.median_s(step, reps=10)})
        print(f"  mixed batch {b:>4} context {c:>5} + prefill {chunk:>5}: "
              f"{points[-1]['s'] * 1e3:8.3f} ms", flush=True)
    return points


def measure_host_link(shape: Shape, timer: Timer, device: torch.device) -> dict[str, Any]:
    """Pinned host memory <-> GPU: bulk copies each way, then 64 KiB blocks (a 16-token block
    of one layer's K and V at Llama-3-8B's shape) copied one by one, issued from Python and
    replayed from a CUDA graph, and gathered on the GPU first into one bulk copy."""
    if device.type != "cuda":
        return {"skipped": "no GPU: the host link is a GPU's"}
    n = shape.swap_bytes
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(n, dtype=torch.uint8, device=device)
    h2d = n / timer.median_s(lambda: gpu.copy_(host, non_blocking=True), reps=5)
    d2h = n / timer.median_s(lambda: host.copy_(gpu, non_blocking=True), reps=5)
    block, pieces = 64 << 10, 512
    blocks = gpu.view(-1, block)
    scattered = torch.arange(0, 2 * pieces, 2, device=device)  # every other block
    staging = torch.empty(pieces, block, dtype=torch.uint8, device=device)

    def blocks_out() -> None:
        for i in range(pieces):
            host[i * block:(i + 1) * block].copy_(blocks[2 * i], non_blocking=True)

    def gathered_out() -> None:
        torch.index_select(blocks, 0, scattered, out=staging)
        host[:pieces * block].copy_(staging.view(-1), non_blocking=True)

    moved = pieces * block
    result = {"h2d_GBps": h2d / 1e9, "d2h_GBps": d2h / 1e9,
              "d2h_64KiB_blocks_GBps": moved / timer.median_s(blocks_out, reps=5) / 1e9,
              "d2h_64KiB_gathered_GBps": moved / timer.median_s(gathered_out, reps=5) / 1e9}
    try:  # a graph takes Python's issuing out of the per-block figure
        result["d2h_64KiB_blocks_graphed_GBps"] = moved / timer.median_s(
            graphed(blocks_out, device), reps=5) / 1e9
    except RuntimeError as exc:
        result["d2h_64KiB_blocks_graphed_GBps"] = f"not capturable: {exc}"[:200]
    result["swap_per_token_s"] = shape.kv_bytes_per_token / min(h2d, d2h)
    return result


def measure_ceilings(timer: Timer, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    size = 8192 if device.type == "cuda" else 512
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    mm = timer.median_s(lambda: a @ b, reps=10, warmup=3)
    src = torch.empty(1 << (32 if device.type == "cuda" else 24), dtype=torch.uint8,
                      device=device)
    dst = torch.empty_like(src)
    copy = timer.median_s(lambda: dst.copy_(src), reps=10)
    return {"matmul_TFLOPs": 2 * size ** 3 / mm / 1e12,
            "d2d_copy_TBps_read_plus_write": 2 * src.numel() / copy / 1e12}


def report(info: dict[str, Any], measured: dict[str, float], reference: CostModel,
           fitted: CostModel, profile_name: str) -> None:
    info["comparison"] = [{"term": name, "measured": value, "profile": getattr(reference, name)}
                          for name, value in measured.items()]
    print(f"\nCostModel terms, measured (fit) vs profile {profile_name}:")
    print(f"{'term':<24}{'measured':>14}{'profile':>14}{'ratio':>8}")
    for row in info["comparison"]:
        ref = row["profile"]
        ratio = f"{row['measured'] / ref:.2f}x" if ref else "n/a"
        print(f"{row['term']:<24}{row['measured']:>14.3e}{ref or 0:>14.3e}{ratio:>8}")
    print("\nsteps (ms): measured, the profile's prediction, the fit's prediction")
    for pt in info["decode"]["points"]:
        b, c = pt["batch"], pt["context"]
        print(f"  decode b={b:>4} c={c:>5}            {pt['graphed_s'] * 1e3:8.3f}  "
              f"{reference.step_s(b, b * c, 0) * 1e3:8.3f}  "
              f"{fitted.step_s(b, b * c, 0) * 1e3:8.3f}")
    for pt in info["prefill"]["points"]:
        tokens = pt["tokens"]
        print(f"  prefill {pt['prompts']:>2} x {pt['length']:>5}            {pt['s'] * 1e3:8.3f}  "
              f"{reference.step_s(0, 0, tokens) * 1e3:8.3f}  "
              f"{fitted.step_s(0, 0, tokens) * 1e3:8.3f}")
    for pt in info["mixed"]:
        b, c, chunk = pt["batch"], pt["context"], pt["prefill"]
        print(f"  mixed b={b:>4} c={c:>5} +{chunk:>5}  {pt['s'] * 1e3:8.3f}  "
              f"{reference.step_s(b, b * c, chunk) * 1e3:8.3f}  "
              f"{fitted.step_s(b, b * c, chunk) * 1e3:8.3f}")
    for pt in info["decode"]["eager"]:
        print(f"  eager decode b={pt['batch']} c={pt['context']}: {pt['eager_s'] * 1e3:.3f} ms")
    info["derived"] = {name: {"profile": getattr(reference, name)(),
                              "fit": getattr(fitted, name)()}
                       for name in ("guard_chunk_tokens", "phase_period_s")}
    print(f"derived (profile / fit): {info['derived']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--out", help="write the measurements and fits here as JSON")
    args = p.parse_args(argv)
    shape, device = SHAPES[args.shape], torch.device(args.device)
    reference = cost_profile(args.profile)
    torch.manual_seed(0)
    info: dict[str, Any] = {"shape": args.shape, "torch": torch.__version__,
                            "device": torch.cuda.get_device_name(device)
                            if device.type == "cuda" else "cpu", "profile": args.profile}
    print(f"{info['device']}, torch {info['torch']}, shape {args.shape}", flush=True)
    timer = Timer(device)
    with torch.inference_mode():
        max_kv = max(b * c for b, c in shape.decode_points)
        t0 = time.perf_counter()
        model = Decoder(shape, device, max_kv)
        info["build_s"] = time.perf_counter() - t0
        info["ceilings"] = measure_ceilings(timer, device, model.dtype)
        print(f"ceilings: {info['ceilings']}", flush=True)
        info["decode"] = measure_decode(model, timer, device)
        info["prefill"] = measure_prefill(model, timer, device)
        info["mixed"] = measure_mixed(model, timer, device)
        del model
    info["host_link"] = measure_host_link(shape, timer, device)
    print(f"host link: {info['host_link']}", flush=True)

    measured = {**info["decode"]["fit"],
                "prefill_per_token_s": info["prefill"]["fit"]["prefill_per_token_s"]}
    if "swap_per_token_s" in info["host_link"]:
        measured["swap_per_token_s"] = info["host_link"]["swap_per_token_s"]
    fitted = replace(reference, **measured)
    report(info, measured, reference, fitted, args.profile)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
