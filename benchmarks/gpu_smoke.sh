#!/usr/bin/env bash
# GPU smoke test of flatscore's vLLM path: BF16 vs AWQ W4A16 on one small real model.
#
# NEEDS: one NVIDIA GPU, vLLM installed (`vllm` on PATH, e.g. inside containers/Dockerfile.inference,
# where `flatscore` comes from its venv), flatscore installed, the model in the HF cache or network
# to the Hub. It cannot run on the CPU-only development machine (no GPU, no vLLM there): it was
# written there and checked with bash -n and shellcheck only.
#
# What it does, in under ~10 minutes on one H100/H200-class GPU with the default model:
#   1. generates synthetic retail data and expert calibration dialogues (flatscore generate-domain/demos)
#   2. quantizes the model with AWQ W4A16 (flatscore quantize -> compressed-tensors dir)
#   3. for each arm (bf16, int4): `vllm serve` with Hermes tool calling, waits for /health,
#      runs a few episodes (flatscore episodes --agent llm --backend openai), stops the server
#   4. prints one table: tokens/s, episodes/s, success, error-channel counts (from metrics.json)
#
# Environment knobs (defaults in brackets):
#   MODEL [Qwen/Qwen2.5-0.5B-Instruct]   HF id or local dir of the full-precision model
#   WORKDIR [./gpu_smoke]   N_TASKS [8]   TRIALS [1]   BUDGET [10]   PORT [8011]
#   GROUP_SIZE [128]   N_CALIBRATION [32]   MAX_MODEL_LEN [8192]   GPU_MEM [0.6]
#   HEALTH_TIMEOUT [300] s per server start   EPISODE_TIMEOUT [180] s per arm
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
WORKDIR=${WORKDIR:-./gpu_smoke}
N_TASKS=${N_TASKS:-8}
TRIALS=${TRIALS:-1}
BUDGET=${BUDGET:-10}
PORT=${PORT:-8011}
GROUP_SIZE=${GROUP_SIZE:-128}
N_CALIBRATION=${N_CALIBRATION:-32}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-8192}
GPU_MEM=${GPU_MEM:-0.6}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
EPISODE_TIMEOUT=${EPISODE_TIMEOUT:-180}

log() { printf '[gpu_smoke %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in vllm flatscore curl python3 nvidia-smi; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found on PATH (this script needs a GPU machine with vLLM)"
done
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi sees no GPU"

mkdir -p "$WORKDIR"
WORKDIR=$(cd "$WORKDIR" && pwd)
DATA=$WORKDIR/data/retail
INT4=$WORKDIR/models/int4
T0=$SECONDS

SERVER_PID=""
stop_server() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    log "stopping vLLM (pid $SERVER_PID)"
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'stop_server; exit 130' INT TERM

# 1. data and calibration --------------------------------------------------------------------
if [[ ! -f $DATA/tasks.json ]]; then
  log "generating synthetic retail data"
  flatscore generate-domain --domain retail --out "$DATA" --seed 0 --n-tasks 60 >"$WORKDIR/generate.log" 2>&1 \
    || die "generate-domain failed (see $WORKDIR/generate.log)"
fi
if [[ ! -s $WORKDIR/calibration.jsonl ]]; then
  log "recording expert calibration dialogues"
  flatscore demos --domain "retail=$DATA" --split train --prompt full --out "$WORKDIR/calibration.jsonl" \
    >"$WORKDIR/demos.log" 2>&1 || die "demos failed (see $WORKDIR/demos.log)"
fi

# 2. AWQ W4A16 --------------------------------------------------------------------------------
if [[ ! -f $INT4/config.json ]]; then
  log "quantizing $MODEL (AWQ W4A16, group $GROUP_SIZE)"
  t=$SECONDS
  flatscore quantize --model "$MODEL" --out "$INT4" --scheme w4a16 --group-size "$GROUP_SIZE" \
    --calibration "$WORKDIR/calibration.jsonl" --n-calibration "$N_CALIBRATION" >"$WORKDIR/quantize.log" 2>&1 \
    || die "quantize failed (see $WORKDIR/quantize.log)"
  log "quantized in $((SECONDS - t)) s"
fi

# 3. serve and run each arm -------------------------------------------------------------------
run_arm() {  # run_arm <name> <precision> <model path>
  local name=$1 precision=$2 path=$3 cell=$WORKDIR/cells/$1 t0 t1
  log "[$name] starting vllm serve $path"
  vllm serve "$path" --served-model-name "$name" --host 127.0.0.1 --port "$PORT" \
    --dtype bfloat16 --max-model-len "$MAX_MODEL_LEN" --gpu-memory-utilization "$GPU_MEM" \
    --enable-auto-tool-choice --tool-call-parser hermes --seed 0 \
    >"$WORKDIR/vllm-$name.log" 2>&1 &
  SERVER_PID=$!
  local deadline=$((SECONDS + HEALTH_TIMEOUT))
  until curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      tail -n 30 "$WORKDIR/vllm-$name.log" >&2
      die "[$name] vLLM exited before becoming healthy (see $WORKDIR/vllm-$name.log)"
    fi
    ((SECONDS < deadline)) || { stop_server; die "[$name] vLLM not healthy after ${HEALTH_TIMEOUT}s"; }
    sleep 2
  done
  log "[$name] healthy after $((SECONDS - deadline + HEALTH_TIMEOUT)) s; running episodes"
  rm -rf "$cell"
  t0=$(date +%s.%N)
  if ! timeout "$EPISODE_TIMEOUT" flatscore episodes --domain retail --data "$DATA" --split test \
      --tasks "first:$N_TASKS" --trials "$TRIALS" --budget "$BUDGET" \
      --agent llm --backend openai --base-url "http://127.0.0.1:$PORT/v1" \
      --model "$path" --served-model "$name" --model-name smoke --precision "$precision" \
      --prompt full --max-in-flight 16 --max-new-tokens 512 --seed 0 --no-progress \
      --out "$cell" >"$WORKDIR/episodes-$name.log" 2>&1; then
    stop_server
    die "[$name] episodes failed or timed out (see $WORKDIR/episodes-$name.log)"
  fi
  t1=$(date +%s.%N)
  python3 - "$t0" "$t1" >"$cell/elapsed_seconds" <<'PY'
import sys
print(float(sys.argv[2]) - float(sys.argv[1]))
PY
  stop_server
}

run_arm bf16 full "$MODEL"
run_arm int4 int4 "$INT4"

# 4. table ------------------------------------------------------------------------------------
python3 - "$WORKDIR/cells" <<'PY'
import json, sys
from pathlib import Path

root = Path(sys.argv[1])
rows = []
for arm in ("bf16", "int4"):
    m = json.loads((root / arm / "metrics.json").read_text())
    secs = float((root / arm / "elapsed_seconds").read_text())
    rows.append((arm, m, secs))
channels = sorted({k for _, m, _ in rows for k, v in m.items() if k.startswith("channel_")})
head = ["arm", "episodes", "success", "tokens/s", "episodes/s", "seconds"] + [c.removeprefix("channel_") for c in channels]
table = []
for arm, m, secs in rows:
    table.append([arm, f"{m['n_scored']}/{m['n_episodes']}", f"{m['success_rate']:.3f}",
                  f"{m['completion_tokens'] / secs:.1f}", f"{m['n_episodes'] / secs:.2f}", f"{secs:.1f}"]
                 + [str(int(m.get(c, 0))) for c in channels])
widths = [max(len(str(r[i])) for r in [head] + table) for i in range(len(head))]
for r in [head] + table:
    print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))
PY
log "done in $((SECONDS - T0)) s; cells, logs and the int4 model under $WORKDIR"
