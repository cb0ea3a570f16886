"""bench/lora_load.py without the engine: the widest adapter it loads is one this deployment
accepts (rank and modules within the checks, every tensor of the model's shapes), and the
report prints each figure."""

from __future__ import annotations

import json
from pathlib import Path

from bench.lora_load import MAX_RANK, MODULES, report, widest_adapter
from service.adapters.validation import check_config, check_weights


def test_the_widest_adapter_passes_the_upload_checks(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}))
    folder = widest_adapter(model, tmp_path / "widest", rank=4)
    info = check_config((folder / "adapter_config.json").read_bytes(), max_rank=MAX_RANK)
    assert info.rank == 4 and set(info.target_modules) == set(MODULES)
    check_weights(folder / "adapter_model.safetensors", info)
    from safetensors import safe_open

    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    assert len(shapes) == 2 * 2 * len(MODULES)
    layer = "base_model.model.model.layers.1"
    assert shapes[f"{layer}.self_attn.k_proj.lora_B.weight"] == (32, 4)  # 2 kv heads of 16
    assert shapes[f"{layer}.mlp.down_proj.lora_A.weight"] == (4, 96)


def test_the_report_names_every_figure() -> None:
    text = report({
        "engine_start_s": 40.0, "adapter_rank": 8, "adapter_modules": ["q_proj"],
        "adapter_bytes": 3_000_000, "add_lora_first_s": 0.02, "add_lora_s": [0.015, 0.014],
        "add_lora_median_s": 0.0145, "widest_rank": 16, "widest_bytes": 19_600_000,
        "widest_add_lora_first_s": 0.035, "widest_add_lora_s": [0.03], "n": 2,
        "widest_add_lora_median_s": 0.03, "prompt_tokens": 128,
        "ttft_s": {"base": [0.3], "warm": [1.5], "cold": [1.4]},
        "ttft_median_s": {"base": 0.3, "warm": 1.5, "cold": 1.4}})
    assert "(3.0 MB): add_lora first (cold) 20 ms" in text
    assert "median 14 ms" in text and "19.6 MB" in text
    assert "base 300, adapter loaded 1500, adapter not loaded 1400" in text
