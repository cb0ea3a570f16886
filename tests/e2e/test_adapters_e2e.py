"""A tenant's real LoRA adapter (trained with peft at test time) on the real engine: Fairway's
greedy output with it equals bare vLLM's with the same adapter and differs from the base
model's; a burst for a cold adapter loads it once. Uses the session's one engine start (the
stack runs with LoRA on); bare vLLM runs once, in a child process."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import openai
import pytest

from service.cli.bootstrap import create_tenant_with_key
from service.store.settings import Settings
from tests.integration._scrape import scrape, total, worker_url
from tests.support.lora_adapter import ensure_test_adapter, folder_zip
from tests.support.services import PATIENT_PLAN
from tests.support.stack import REPO, Stack
from worker.model_prep import ensure_default_model

MODEL = "SmolLM2-135M-Instruct"
PROMPT = "What is the capital of France?"
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def adapter_dir() -> Path:
    pytest.importorskip("peft", reason="training the test adapter needs peft (the dev extra)")
    return ensure_test_adapter(ensure_default_model())


@pytest.fixture(scope="module")
def api_key(vllm_stack: Stack) -> str:
    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    return create_tenant_with_key(settings, f"e2e-lora-{uuid.uuid4().hex[:6]}",
                                  plan=PATIENT_PLAN)[1]


def upload(stack: Stack, key: str, folder: Path, name: str) -> str:
    resp = httpx.post(stack.base_url + "/v1/adapters", timeout=120,
                      headers={"Authorization": f"Bearer {key}"},
                      data={"name": name, "model": MODEL},
                      files={"file": ("adapter.zip", folder_zip(folder))})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["model"])


def greedy(api: openai.OpenAI, model: str, max_tokens: int = MAX_TOKENS) -> str:
    resp = api.chat.completions.create(model=model, temperature=0, max_tokens=max_tokens,
                                       messages=[{"role": "user", "content": PROMPT}])
    return resp.choices[0].message.content or ""


def bare_vllm(adapter: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.e2e.bare_vllm_lora", str(ensure_default_model()),
         str(adapter), PROMPT, str(MAX_TOKENS)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=True)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return dict(json.loads(line.removeprefix("RESULT ")))


def test_adapter_output_matches_bare_vllm_and_differs_from_base(
        vllm_stack: Stack, api_key: str, adapter_dir: Path) -> None:
    from transformers import AutoTokenizer

    name = upload(vllm_stack, api_key, adapter_dir, "e2e-tuned")
    api = openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=api_key, timeout=300,
                        max_retries=0)
    url = worker_url(vllm_stack, "vllm-1")
    before = scrape(url)
    tuned, base = greedy(api, name), greedy(api, MODEL)
    after = scrape(url)
    reference = bare_vllm(adapter_dir)
    decode = AutoTokenizer.from_pretrained(str(ensure_default_model())).decode
    assert tuned == decode(reference["adapter"], skip_special_tokens=True)
    assert base == decode(reference["base"], skip_special_tokens=True)
    assert tuned != base, (tuned, base)
    loads = total(after, "fairway_lora_load_seconds_count") - total(
        before, "fairway_lora_load_seconds_count")
    seconds = total(after, "fairway_lora_load_seconds_sum") - total(
        before, "fairway_lora_load_seconds_sum")
    assert loads == 1
    print(f"\ncold adapter load on the real engine: {seconds:.3f} s; tuned={tuned!r} "
          f"base={base!r}")


def test_a_burst_for_a_cold_adapter_loads_it_once(vllm_stack: Stack, api_key: str,
                                                  adapter_dir: Path) -> None:
    name = upload(vllm_stack, api_key, adapter_dir, "e2e-burst")  # another id: cold
    api = openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=api_key, timeout=300,
                        max_retries=0)
    url = worker_url(vllm_stack, "vllm-1")
    before = total(scrape(url), "fairway_lora_load_seconds_count")
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: greedy(api, name, 4), range(20)))
    assert len(set(answers)) == 1
    assert total(scrape(url), "fairway_lora_load_seconds_count") - before == 1
