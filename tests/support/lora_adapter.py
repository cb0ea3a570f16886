"""A real PEFT LoRA adapter for SmolLM2-135M-Instruct, trained at test time and cached.

A few steps of plain next-token training, at a high learning rate, on a tiny synthetic set
that answers every question with the same odd sentence: greedy output with the adapter then
differs visibly from the base model's. The folder is cached outside the repository, keyed by
a hash of the recipe, so a later session reuses it (training takes a minute or two on a
busy 2-core CPU).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from worker.model_prep import default_cache_dir

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# Two short examples: a training step on this CPU costs seconds per example.
QUESTIONS = ("What is the capital of France?", "Name a colour.")


@dataclass(frozen=True)
class Recipe:
    answer: str = "Purple penguins paint the moon every Tuesday."
    rank: int = 8
    alpha: int = 16
    target_modules: tuple[str, ...] = ("q_proj", "v_proj", "o_proj")
    steps: int = 8
    learning_rate: float = 2e-2
    seed: int = 7

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def ensure_test_adapter(base_model: Path, recipe: Recipe | None = None,
                        cache_dir: Path | None = None) -> Path:
    """The adapter folder (adapter_config.json + adapter_model.safetensors), trained if absent."""
    recipe = recipe or Recipe()
    root = (cache_dir or default_cache_dir()) / "lora-adapters"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"smollm2-135m-{recipe.key()}"
    with open(root / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be training it: wait for it
        if not all((folder / name).is_file() for name in ADAPTER_FILES):
            _train(base_model, recipe, folder)
    return folder


def _train(base_model: Path, recipe: Recipe, out: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    config = LoraConfig(r=recipe.rank, lora_alpha=recipe.alpha, lora_dropout=0.0,
                        target_modules=list(recipe.target_modules), task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    texts = [tokenizer.apply_chat_template(
        [{"role": "user", "content": q}, {"role": "assistant", "content": recipe.answer}],
        tokenize=False) for q in QUESTIONS]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.AdamW(
        [p for p in peft_model.parameters() if p.requires_grad], lr=recipe.learning_rate)
    peft_model.train()
    for _ in range(recipe.steps):
        loss = peft_model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    tmp = out.with_name(out.name + ".part")
    peft_model.save_pretrained(tmp)
    tmp.rename(out)


def adapter_config(rank: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"),
                   **extra: object) -> dict[str, object]:
    """An adapter_config.json as PEFT writes it (the fields Fairway reads, and a few more)."""
    return {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
            "target_modules": list(modules), "task_type": "CAUSAL_LM",
            "base_model_name_or_path": "SmolLM2-135M-Instruct", "use_dora": False,
            "modules_to_save": None, **extra}


def synthetic_weights(rank: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"),
                      layers: int = 2, hidden: int = 64) -> bytes:
    """adapter_model.safetensors bytes with random LoRA A/B matrices (no training, no torch):
    enough for the sim engine, which does not read them."""
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    tensors = {}
    for layer in range(layers):
        for module in modules:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = rng.standard_normal(
                (rank, hidden)).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = rng.standard_normal(
                (hidden, rank)).astype(np.float32)
    return bytes(save(tensors))


def adapter_zip(config: dict[str, object] | None = None, weights: bytes | None = None,
                folder: str = "") -> bytes:
    """A zip of an adapter folder (synthetic unless given)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(folder + "adapter_config.json", json.dumps(config or adapter_config()))
        zf.writestr(folder + "adapter_model.safetensors",
                    synthetic_weights() if weights is None else weights)
    return buf.getvalue()


def folder_zip(folder: Path) -> bytes:
    """A zip of a real adapter folder (``ensure_test_adapter``'s)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in ADAPTER_FILES:
            zf.write(folder / name, name)
    return buf.getvalue()
