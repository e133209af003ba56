#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds with CUDA, runs the whole test suite (the kernel and
# device-forward-pass tests run on the device: ctest kernels_gpu and backend_gpu), compares the
# CUDA and CPU backends' logits (the backend tests: fixture models and stories260K, tolerance
# max |diff| <= 0.02 + 0.02 * max |logit|, see tests/kernels/test_device_context.cpp), and runs
# slake-bench on a synthetic Llama-3.1-8B at 4K..128K context for full and slake --kv-budget 1024.
# Results go to $OUT_DIR (default docs/gpu-check/<date>).
#   scripts/gpu-check.sh [--quick]   (--quick: 4K and 16K only, one repetition)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
OUT_DIR="${OUT_DIR:-$ROOT/docs/gpu-check/$(date +%Y%m%d-%H%M%S)}"
DEPTHS=(4096 16384 32768 65536 131072)
REPS=3
if [[ "${1:-}" == "--quick" ]]; then
  DEPTHS=(4096 16384)
  REPS=1
fi

command -v nvidia-smi >/dev/null || { echo "gpu-check: nvidia-smi not found: no GPU here" >&2; exit 1; }
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[[ -x "$NVCC" ]] || { echo "gpu-check: nvcc not found (set NVCC)" >&2; exit 1; }
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT_DIR/gpu.txt"

echo "== build (CUDA on)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLAKE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
  | tee "$OUT_DIR/cmake.txt"
cmake --build "$BUILD" -j "$(nproc)" 2>&1 | tail -n 5

echo "== the whole test suite (kernels_gpu and backend_gpu run on the device)"
(cd "$BUILD" && ctest --output-on-failure -j "$(nproc)") 2>&1 | tee "$OUT_DIR/ctest.txt"
if grep -Eq "kernels_gpu .*Skipped|backend_gpu .*Skipped" "$OUT_DIR/ctest.txt"; then
  echo "gpu-check: the device tests were skipped: no usable CUDA device" >&2
  exit 1
fi

echo "== CUDA vs CPU logits (tiny fixture models, stories260K), with the per-comparison max |diff|"
"$BUILD/bin/slake-backend-tests-gpu" 2>&1 | tee "$OUT_DIR/logits-cuda-vs-cpu.txt"

STORIES="$ROOT/../shared/models/stories260K.gguf"
if [[ -f "$STORIES" ]]; then
  echo "== slake-cli on stories260K: greedy text of both backends"
  "$BUILD/bin/slake-cli" -m "$STORIES" -c 256 -n 64 --temp 0 --backend cpu > "$OUT_DIR/stories-cpu.txt"
  "$BUILD/bin/slake-cli" -m "$STORIES" -c 256 -n 64 --temp 0 --backend cuda > "$OUT_DIR/stories-cuda.txt"
  if cmp -s "$OUT_DIR/stories-cpu.txt" "$OUT_DIR/stories-cuda.txt"; then echo "same text"; else echo "texts differ (bf16 weights)"; fi
fi

echo "== slake-bench: synthetic Llama-3.1-8B (bf16 weights on the device), pp512 and tg128 at each depth"
for d in "${DEPTHS[@]}"; do
  for kv in "--kv-policy full" "--kv-policy slake --kv-budget 1024"; do
    # shellcheck disable=SC2086  # $kv holds two flags
    "$BUILD/bin/slake-bench" --synthetic llama-3.1-8b --synthetic-type bf16 --backend cuda $kv -d "$d" -p 512 -n 128 --ctx-beyond-train \
      -r "$REPS" -o jsonl >> "$OUT_DIR/bench-llama-3.1-8b.jsonl" || echo "slake-bench failed at depth $d ($kv)" >&2
  done
done
echo "gpu-check: results in $OUT_DIR"
