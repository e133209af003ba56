#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds with CUDA, runs the whole test suite (the kernel and
# device-forward-pass tests run on the device: ctest kernels_gpu and backend_gpu), compares the
# CUDA and CPU backends' logits (the backend tests: fixture models and stories260K, tolerance
# max |diff| <= 0.02 + 0.02 * max |logit|, see tests/kernels/test_device_context.cpp), and runs
# slake-bench on synthetic models (default Llama-3.1-8B) at 4K..128K context for full and slake
# --kv-budget 1024, then the time to first token of a 16K prompt whole and in chunks (and an nsys
# profile of a chunked prefill where Nsight Systems is installed). Results go to $OUT_DIR (default docs/gpu-check/<date>).
#   scripts/gpu-check.sh [--quick] [--prebuilt] [--models a,b] [--depths d1,d2]
#   --quick:    4K and 16K only, one repetition, an 8K prompt for the time to first token
#   --models:   slake-bench's synthetic presets to bench, each in its own run (default llama-3.1-8b)
#   --depths:   the context depths to bench at (after --quick, overrides its depths)
#   --prebuilt: use the binaries already in $BUILD_DIR (a machine without the build's Debian packages:
#               build elsewhere with -DSLAKE_CUDA=ON -DSLAKE_NATIVE=OFF, targets slake-kernel-tests-gpu,
#               slake-backend-tests-gpu, slake-cli and slake-bench); skips the build and the CPU suite
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
OUT_DIR="${OUT_DIR:-$ROOT/docs/gpu-check/$(date +%Y%m%d-%H%M%S)}"
DEPTHS=(4096 16384 32768 65536 131072)
REPS=3
TTFT_PROMPT=16384
PREBUILT=0
MODELS=(llama-3.1-8b)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) DEPTHS=(4096 16384); REPS=1; TTFT_PROMPT=8192 ;;
    --prebuilt) PREBUILT=1 ;;
    --models|--depths)
      [[ $# -ge 2 ]] || { echo "gpu-check: $1 needs a comma-separated list" >&2; exit 2; }
      IFS=, read -r -a list <<< "$2"
      if [[ $1 == --models ]]; then MODELS=("${list[@]}"); else DEPTHS=("${list[@]}"); fi
      shift ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
SHARED="${SLAKE_SHARED_DIR:-$ROOT/../shared}"
# cuBLAS is opened at run time (dlopen): the toolkit's library folder must be on the search path.
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"

command -v nvidia-smi >/dev/null || { echo "gpu-check: nvidia-smi not found: no GPU here" >&2; exit 1; }
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[[ -x "$NVCC" ]] || { echo "gpu-check: nvcc not found (set NVCC)" >&2; exit 1; }
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT_DIR/gpu.txt"

if [[ $PREBUILT == 0 ]]; then
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
else
  echo "== the kernels on the device against their CPU references"
  set +e
  timeout 180 "$BUILD/bin/slake-kernel-tests-gpu" 2>&1 | tee "$OUT_DIR/kernels-gpu.txt"
  rc=${PIPESTATUS[0]}
  set -e
  [[ $rc == 0 ]] || echo "gpu-check: slake-kernel-tests-gpu exited with $rc" >&2
fi

echo "== CUDA vs CPU logits (tiny fixture models, stories260K), with the per-comparison max |diff|"
set +e
SLAKE_SHARED_DIR="$SHARED" timeout 180 "$BUILD/bin/slake-backend-tests-gpu" 2>&1 | tee "$OUT_DIR/logits-cuda-vs-cpu.txt"
rc=${PIPESTATUS[0]}
set -e
[[ $rc == 0 ]] || echo "gpu-check: slake-backend-tests-gpu exited with $rc" >&2

STORIES="$SHARED/models/stories260K.gguf"
if [[ -f "$STORIES" ]]; then
  echo "== slake-cli on stories260K: greedy text of both backends"
  for b in cpu cuda; do
    timeout 60 "$BUILD/bin/slake-cli" -m "$STORIES" -c 256 -n 64 --temp 0 --backend "$b" > "$OUT_DIR/stories-$b.txt" \
      || echo "gpu-check: slake-cli --backend $b failed" >&2
  done
  if cmp -s "$OUT_DIR/stories-cpu.txt" "$OUT_DIR/stories-cuda.txt"; then echo "same text"; else echo "texts differ (bf16 weights)"; fi
  cat "$OUT_DIR/stories-cuda.txt"
fi

echo "== slake-bench: synthetic models (bf16 weights on the device), pp512 and tg128 at each depth"
# One invocation per model: its weights are made and uploaded once; every depth runs full and slake C=1024.
depths=$(IFS=,; echo "${DEPTHS[*]}")
for model in "${MODELS[@]}"; do
  echo "-- $model"
  "$BUILD/bin/slake-bench" --synthetic "$model" --synthetic-type bf16 --backend cuda --kv-policy full,slake --kv-budget 1024 \
    -d "$depths" -p 512 -n 128 --ctx-beyond-train -t "$(nproc)" -r "$REPS" -o jsonl > "$OUT_DIR/bench-$model.jsonl" \
    || echo "slake-bench failed on $model" >&2
  cat "$OUT_DIR/bench-$model.jsonl"
done
echo "== time to first token: a $TTFT_PROMPT-token prompt into an empty cache, in chunks of 2048 and whole (C=1024)"
for model in "${MODELS[@]}"; do
  echo "-- $model"
  "$BUILD/bin/slake-bench" --synthetic "$model" --synthetic-type bf16 --backend cuda --kv-policy full,snapkv,cake,slake-wide \
    --kv-budget 1024 --prefill-chunk 2048,0 -p "$TTFT_PROMPT" -n 0 -r 1 --no-warmup --ctx-beyond-train -t "$(nproc)" -o jsonl \
    > "$OUT_DIR/ttft-$model.jsonl" || echo "slake-bench (ttft) failed on $model" >&2
  cat "$OUT_DIR/ttft-$model.jsonl"
done
# Where a chunked prefill's time goes, by kernel and by CUDA API call, when Nsight Systems is here.
NSYS="$(command -v nsys || true)"
for candidate in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
  [[ -z "$NSYS" && -x "$candidate" ]] && NSYS="$candidate"
done
if [[ -n "$NSYS" ]]; then
  echo "== nsys: an 8K prompt in chunks of 2048 (snapkv C=1024) on ${MODELS[0]}"
  "$NSYS" profile -o "$OUT_DIR/chunked" --force-overwrite true "$BUILD/bin/slake-bench" --synthetic "${MODELS[0]}" \
    --synthetic-type bf16 --backend cuda --kv-policy snapkv --kv-budget 1024 --prefill-chunk 2048 -p 8192 -n 0 -r 1 \
    --no-warmup --ctx-beyond-train -o jsonl > "$OUT_DIR/nsys.log" 2>&1 || echo "gpu-check: nsys profile failed" >&2
  for report in cuda_gpu_kern_sum cuda_api_sum; do
    "$NSYS" stats --report "$report" --format csv -o "$OUT_DIR/chunked" "$OUT_DIR/chunked.nsys-rep" > /dev/null 2>&1 || true
  done
  rm -f "$OUT_DIR/chunked.nsys-rep" "$OUT_DIR/chunked.sqlite"
  head -n 15 "$OUT_DIR"/chunked_cuda_gpu_kern_sum.csv 2>/dev/null || true
fi
echo "gpu-check: results in $OUT_DIR"
