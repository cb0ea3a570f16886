"""Bare vLLM (offline `LLM`) with and without a LoRA adapter: the reference the adapter e2e
test compares Fairway with. Run as a program (vLLM's engine spawns processes, so it needs
its own ``__main__``); prints one JSON object: {"base": [token ids], "adapter": [token ids],
"adapter_text": str}.

    python -m tests.e2e.bare_vllm_lora MODEL_DIR ADAPTER_DIR PROMPT MAX_TOKENS
"""

from __future__ import annotations

import json
import sys


def main(model: str, adapter: str, prompt: str, max_tokens: int) -> dict[str, object]:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    tokenizer = AutoTokenizer.from_pretrained(model)
    # As Fairway's vLLM engine encodes a chat (worker.engine.vllm_engine.encode_chat).
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)
    ids = tokenizer.encode(text, add_special_tokens=False)
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=2048,
              kv_cache_memory_bytes=1 << 30, enable_lora=True, max_lora_rank=16,
              max_loras=4, max_cpu_loras=8)
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    base = llm.generate(TokensPrompt(prompt_token_ids=ids), params)[0].outputs[0]
    tuned = llm.generate(TokensPrompt(prompt_token_ids=ids), params,
                         lora_request=LoRARequest("adapter", 1, adapter))[0].outputs[0]
    return {"base": list(base.token_ids), "adapter": list(tuned.token_ids),
            "adapter_text": tuned.text}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))))
