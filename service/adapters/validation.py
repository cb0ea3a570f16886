"""Checks an uploaded PEFT LoRA adapter before it is accepted: its config and its weights'
header, never its tensors (safetensors reads the header alone; the data stays unread).

What is refused: anything but a LoRA adapter (``peft_type``), a rank above the engine's
``max_lora_rank`` (workers size their LoRA buffers for it), target modules the engine cannot
adapt (a regex instead of a list, too), DoRA and ``modules_to_save`` (vLLM serves neither),
and weights that do not parse or do not match the config (a tensor for another module, or of
another rank).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open

# The linear layers of a Llama-style decoder (SmolLM2 is one) that vLLM's LoRA layers replace.
KNOWN_TARGET_MODULES = frozenset(
    {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
_LORA_KEY = re.compile(
    r"\.(?P<module>[A-Za-z0-9_]+)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_]+)?\.weight$")


class InvalidAdapter(ValueError):
    """The adapter is refused; the message is meant for the client."""


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    rank: int
    target_modules: tuple[str, ...]
    base_model_hint: str | None  # the config's base_model_name_or_path (informative only)


def check_config(raw: bytes, *, max_rank: int) -> AdapterInfo:
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidAdapter(f"adapter_config.json is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise InvalidAdapter("adapter_config.json must hold a JSON object.")
    if config.get("peft_type") != "LORA":
        raise InvalidAdapter(f"peft_type must be 'LORA', got {config.get('peft_type')!r}.")
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise InvalidAdapter(f"r (the LoRA rank) must be a positive integer, got {rank!r}.")
    if rank > max_rank:
        raise InvalidAdapter(f"The adapter's rank {rank} exceeds this deployment's "
                             f"max_lora_rank of {max_rank}.")
    modules = config.get("target_modules")
    if not isinstance(modules, list) or not modules or \
            not all(isinstance(m, str) for m in modules):
        raise InvalidAdapter("target_modules must be a non-empty list of module names.")
    unknown = sorted(set(modules) - KNOWN_TARGET_MODULES)
    if unknown:
        raise InvalidAdapter(f"Unsupported target_modules {unknown}; supported: "
                             f"{sorted(KNOWN_TARGET_MODULES)}.")
    if config.get("use_dora"):
        raise InvalidAdapter("DoRA adapters (use_dora) are not supported.")
    if config.get("modules_to_save"):
        raise InvalidAdapter("Adapters with modules_to_save are not supported.")
    hint = config.get("base_model_name_or_path")
    return AdapterInfo(rank, tuple(sorted(set(modules))), hint if isinstance(hint, str) else None)


def check_weights(path: Path, info: AdapterInfo) -> None:
    """The safetensors header parses and every tensor is a LoRA A/B matrix of a configured
    module with the configured rank."""
    try:
        with safe_open(str(path), framework="numpy") as weights:
            names = list(weights.keys())  # a safe_open handle is no mapping
            shapes = {name: list(weights.get_slice(name).get_shape()) for name in names}
    except Exception as exc:  # safetensors raises its own error type for any bad header
        raise InvalidAdapter(f"adapter_model.safetensors does not parse: {exc}") from exc
    if not shapes:
        raise InvalidAdapter("adapter_model.safetensors holds no tensors.")
    for name, shape in shapes.items():
        _check_tensor(name, shape, info)


def _check_tensor(name: str, shape: list[int], info: AdapterInfo) -> None:
    match = _LORA_KEY.search(name)
    if match is None:
        raise InvalidAdapter(f"Tensor {name!r} is not a LoRA A/B weight.")
    if match["module"] not in info.target_modules:
        raise InvalidAdapter(f"Tensor {name!r} adapts {match['module']!r}, which is not in "
                             f"target_modules.")
    if len(shape) != 2:
        raise InvalidAdapter(f"Tensor {name!r} has shape {shape}; LoRA weights are matrices.")
    rank_dim = shape[0] if match["ab"] == "A" else shape[1]
    if rank_dim != info.rank:
        raise InvalidAdapter(f"Tensor {name!r} has shape {shape}, not of rank {info.rank}.")

