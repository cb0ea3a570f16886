"""How long the real engine takes to load a tenant's LoRA adapter, and what a cold adapter
costs a request's first token: the figure behind ``FairwayConfig.adapter_load_s`` and the
simulator's ``lora.load_s`` (scheduler.sim.adapters), which were assumed until measured.

Starts Fairway's vLLM engine (worker.engine.vllm_engine, LoRA on, as a worker does) on the
default model with the test adapter (tests/support/lora_adapter.py: rank 8 on q, v and o
projections; trained and cached on first use), then:

1. ``add_lora``: the first load (cold: vLLM's LoRA machinery is first used here), then
   ``remove_lora`` and ``add_lora`` again ``--n`` times; the median of those is the figure.
   The same for the widest adapter the engine takes (rank ``max_lora_rank`` on all seven
   projections, random weights of the model's shapes), to see how a load grows with bytes.
2. The first token of a one-token request (prefix caching off, so each one prefills), ``--n``
   rounds of three: the base model; the adapter already loaded (warm); and an adapter the
   engine has not loaded (cold: a fresh adapter id on the same files, so Fairway's single
   flight loads it before the request runs, as a worker's first request for it does).

    python bench/lora_load.py [--n 5] [--prompt-tokens 128] [--threads N] [--json]

The engine's child processes need this file's ``__main__`` guard.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.lora_adapter import Recipe, ensure_test_adapter  # noqa: E402
from worker.engine.base import EngineRequest, SamplingSpec  # noqa: E402
from worker.engine.config import VllmEngineConfig  # noqa: E402
from worker.engine.lora import LoraConfig, LoraSpec  # noqa: E402
from worker.engine.vllm_engine import VllmEngine  # noqa: E402
from worker.model_prep import MODEL_DIRNAME, ensure_default_model  # noqa: E402

MAX_RANK = 16
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def widest_adapter(model: Path, folder: Path, rank: int = MAX_RANK) -> Path:
    """A PEFT folder with rank ``rank`` on every projection of ``model``'s layers (random
    weights: only the bytes and shapes matter for a load)."""
    import torch
    from safetensors.torch import save_file

    cfg = json.loads((model / "config.json").read_text())
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * cfg.get("head_dim", hidden // cfg["num_attention_heads"])
    shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
              "o_proj": (hidden, hidden), "gate_proj": (hidden, inter),
              "up_proj": (hidden, inter), "down_proj": (inter, hidden)}
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for module, (n_in, n_out) in shapes.items():
            part = "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            key = f"base_model.model.model.layers.{layer}.{part}.{module}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(rank, n_in, generator=gen) * 0.01
            tensors[f"{key}.lora_B.weight"] = torch.randn(n_out, rank, generator=gen) * 0.01
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(MODULES),
        "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model)}))
    return folder


async def _add_lora_times(llm: Any, adapter: Path, int_id: int, n: int) -> list[float]:
    """The first ``add_lora`` of ``adapter``, then ``n`` more, each after ``remove_lora``."""
    from vllm.lora.request import LoRARequest

    request = LoRARequest(f"bench-{int_id}", int_id, str(adapter))
    times: list[float] = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        await llm.add_lora(request)
        times.append(time.perf_counter() - t0)
        await llm.remove_lora(int_id)
    return times


def _spec(adapter: Path, rank: int) -> LoraSpec:
    return LoraSpec("lora-" + uuid.uuid4().hex, str(adapter), rank)


async def _first_token(engine: VllmEngine, prompt: list[int], lora: LoraSpec | None) -> float:
    request = EngineRequest(f"bench-{uuid.uuid4().hex}", prompt,
                            SamplingSpec(max_tokens=1, temperature=0.0, ignore_eos=True),
                            lora=lora)
    started = time.perf_counter()
    async for delta in engine.generate(request):
        if delta.token_ids:
            return time.perf_counter() - started
    raise RuntimeError("the request ended without a token")


async def measure(n: int, prompt_tokens: int, threads: int | None,
                  scratch: Path) -> dict[str, Any]:
    model = ensure_default_model()
    recipe = Recipe()
    adapter = ensure_test_adapter(model, recipe)
    widest = widest_adapter(model, scratch / "widest")
    lora = LoraConfig(max_loras=4, max_cpu_loras=8, max_lora_rank=MAX_RANK,
                      concurrent_loads=1)
    engine = VllmEngine(VllmEngineConfig(
        model_path=str(model), model_name=MODEL_DIRNAME, kv_cache_gib=1, max_model_len=2048,
        enable_prefix_caching=False, num_threads=threads, lora=lora))
    started = time.perf_counter()
    await engine.start()
    start_s = time.perf_counter() - started
    llm: Any = engine._llm  # the bench times vLLM's own add_lora/remove_lora, not a wrapper
    loads = await _add_lora_times(llm, adapter, 1, n)
    wide = await _add_lora_times(llm, widest, 2, n)

    prompt = [(7 * i + 11) % 2000 + 100 for i in range(prompt_tokens)]
    warm = _spec(adapter, recipe.rank)
    await _first_token(engine, prompt, warm)  # loads it: from here on it is warm
    ttft: dict[str, list[float]] = {"base": [], "warm": [], "cold": []}
    for i in range(n):
        tokens = [t + i for t in prompt]  # another prompt each round
        ttft["base"].append(await _first_token(engine, tokens, None))
        ttft["warm"].append(await _first_token(engine, tokens, warm))
        ttft["cold"].append(await _first_token(engine, tokens, _spec(adapter, recipe.rank)))
    await engine.shutdown()
    return {
        "model": MODEL_DIRNAME, "adapter_rank": recipe.rank,
        "adapter_modules": list(recipe.target_modules), "prompt_tokens": prompt_tokens,
        "n": n, "engine_start_s": start_s, "adapter_bytes": _bytes(adapter),
        "add_lora_first_s": loads[0], "add_lora_s": loads[1:],
        "add_lora_median_s": statistics.median(loads[1:]),
        "widest_rank": MAX_RANK, "widest_bytes": _bytes(widest),
        "widest_add_lora_first_s": wide[0], "widest_add_lora_s": wide[1:],
        "widest_add_lora_median_s": statistics.median(wide[1:]),
        "ttft_s": ttft, "ttft_median_s": {k: statistics.median(v) for k, v in ttft.items()},
    }


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(result: dict[str, Any]) -> str:
    med = result["ttft_median_s"]
    lines = [
        f"engine start: {result['engine_start_s']:.1f} s; adapter rank "
        f"{result['adapter_rank']} on {', '.join(result['adapter_modules'])}",
        f"test adapter ({result['adapter_bytes'] / 1e6:.1f} MB): add_lora first (cold) "
        f"{ms(result['add_lora_first_s'])} ms; after remove, n={result['n']}: "
        + " ".join(ms(s) for s in result["add_lora_s"])
        + f" ms; median {ms(result['add_lora_median_s'])} ms",
        f"widest adapter (rank {result['widest_rank']}, all projections, "
        f"{result['widest_bytes'] / 1e6:.1f} MB): first {ms(result['widest_add_lora_first_s'])}"
        f" ms; after remove: " + " ".join(ms(s) for s in result["widest_add_lora_s"])
        + f" ms; median {ms(result['widest_add_lora_median_s'])} ms",
        f"first token, {result['prompt_tokens']}-token prompt, median of {result['n']} "
        f"(ms): base {ms(med['base'])}, adapter loaded {ms(med['warm'])}, "
        f"adapter not loaded {ms(med['cold'])}",
    ]
    for kind, values in result["ttft_s"].items():
        lines.append(f"  {kind:>4}: " + " ".join(ms(s) for s in values))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5, help="repetitions of each timing")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None,
                        help="the engine's CPU threads (default: all cores)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    with tempfile.TemporaryDirectory(prefix="fairway-lora-bench-") as scratch:
        result = asyncio.run(measure(args.n, args.prompt_tokens, args.threads, Path(scratch)))
    print(report(result))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
