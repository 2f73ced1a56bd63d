#!/usr/bin/env bash
# webtune on a real GPU beside PyTorch + PEFT on CUDA, at the Qwen2.5-0.5B and SmolLM2-135M shapes
# (random weights: no download), in one run, then one table with the ratios and each product's
# share of the GPU's f32 peak (scripts/bench-gpu-table.py). Made to fit one 10-minute call of the
# workplace's device tool; nothing is fetched from the internet.
#
#   scripts/bench-gpu.sh [--out DIR] [--no-cuda] [--quick]
#
# WEBTUNE_BIN: a webtune binary built elsewhere (default: cargo build --release here).
# --no-cuda: skip the PyTorch side (on a machine without CUDA, e.g. lavapipe: the script then
#   runs end to end on whatever Vulkan adapter there is). --quick: fewer steps and shapes, and
#   no f16 tilings in the kernel table (the f16 training run stays).
# GPU_PEAK_TFLOPS: the f32 (non-tensor-core) peak to divide by (default: from the GPU's name for
#   the ones listed in bench-gpu-table.py, else PyTorch's own f32 GEMM rate is the reference).
set -uo pipefail
cd "$(dirname "$0")/.."
out=target/bench-gpu
cuda=1
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --no-cuda) cuda=0; shift ;;
    --quick) quick=1; shift ;;
    *) echo "bench-gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
t0=$SECONDS
say() { echo "[$((SECONDS - t0))s] $*" >&2; }

w=${WEBTUNE_BIN:-}
if [ -z "$w" ]; then
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
  say "cargo build --release"
  cargo build --release --bin webtune >&2 || exit 1
  w=target/release/webtune
fi
if ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
  echo "bench-gpu.sh: no Vulkan loader (libvulkan.so.1): apt-get install libvulkan1" >&2
  exit 1
fi
if [ "$cuda" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$out/gpu.txt" 2>/dev/null || true
  cat "$out/gpu.txt" >&2
fi

steps=5; decode_tokens=34
[ "$quick" = 1 ] && { steps=3; decode_tokens=18; }

# One command, its stdout kept in $out/NAME.txt; a failure is reported and the rest still runs.
run() {
  local name=$1; shift
  say "$name: $*"
  if ! timeout "${STEP_TIMEOUT:-300}" "$@" > "$out/$name.txt" 2> "$out/$name.err"; then
    echo "bench-gpu.sh: $name failed (see $out/$name.err)" >&2
    tail -5 "$out/$name.err" >&2
  fi
}

# --- webtune (wgpu on the GPU's Vulkan driver) -------------------------------------------
# --f16-products: the variants that multiply in f16 are timed too (where the adapter has
# shader-f16); not with --quick, where on a CPU adapter the twelve tilings alone take minutes.
if [ "$quick" = 1 ]; then
  run kernels "$w" bench kernels --json "$out/kernels.json" --reps 10
else
  run kernels "$w" --f16-products bench kernels --json "$out/kernels.json" --reps 10
fi
run train-smollm2 "$w" bench --shape smollm2-135m --seq 256 --rank 8 --modes mesp --optimizer adamw \
  --weights bf16 --resident --steps "$steps" --json "$out/train-smollm2.json"
# The same with each phase's end fixed either way (the default: ahead on a GPU, waiting on a CPU
# adapter; see Gpu::set_phases_ahead), to see what the overlap gives on this device.
for phases in each ahead; do
  run "train-smollm2-$phases" env WEBTUNE_PHASES=$phases "$w" bench --shape smollm2-135m --seq 256 --rank 8 \
    --modes mesp --optimizer adamw --weights bf16 --resident --steps "$steps" --json "$out/train-smollm2-$phases.json"
done
run train-qwen05 "$w" bench --shape qwen2.5-0.5b --seq 256 --rank 8 --modes mesp --optimizer adamw \
  --weights bf16 --resident --steps "$steps" --json "$out/train-qwen05.json"
run train-qwen05-f16 "$w" --f16-products bench --shape qwen2.5-0.5b --seq 256 --rank 8 --modes mesp \
  --optimizer adamw --weights bf16 --resident --steps "$steps" --json "$out/train-qwen05-f16.json"
run paper-qwen05 "$w" bench --shape qwen2.5-0.5b --seq 256 --rank 8 --modes mesp,mebp --optimizer sgd \
  --weights q4 --steps 3 --json "$out/paper-qwen05.json"
run profile-qwen05 "$w" bench --shape qwen2.5-0.5b --seq 256 --rank 8 --modes mesp --optimizer adamw \
  --weights bf16 --resident --steps 2 --profile --json "$out/profile-qwen05.json"
run decode-smollm2 "$w" bench decode --shape smollm2-135m --tokens "$decode_tokens" --json "$out/decode-smollm2.json"
[ "$quick" = 1 ] || run decode-qwen05 "$w" bench decode --shape qwen2.5-0.5b --tokens "$decode_tokens" \
  --json "$out/decode-qwen05.json"

# --- PyTorch + PEFT on CUDA ---------------------------------------------------------------
if [ "$cuda" = 1 ]; then
  py=${PYTHON:-python3}
  for shape in smollm2-135m qwen2.5-0.5b; do
    run "torch-train-$shape" "$py" scripts/bench-torch.py train --device cuda --shape "$shape" --seq 256 --rank 8 \
      --steps "$steps" --json "$out/torch-train-$shape.json"
    run "torch-train-ckpt-$shape" "$py" scripts/bench-torch.py train --device cuda --shape "$shape" --seq 256 \
      --rank 8 --steps "$steps" --checkpointing --json "$out/torch-train-ckpt-$shape.json"
    run "torch-decode-$shape" "$py" scripts/bench-torch.py decode --device cuda --shape "$shape" \
      --tokens "$decode_tokens" --json "$out/torch-decode-$shape.json"
  done
  run torch-gemm "$py" scripts/bench-torch.py gemm --device cuda --json "$out/torch-gemm.json"
fi

say "done; the table:"
python3 scripts/bench-gpu-table.py "$out" | tee "$out/table.md"
