#!/usr/bin/env bash
# Set-up, build, and the main job: SmolLM2-135M-Instruct (fetched by the set-up) answers a question
# through its chat template, then reads the first part of a long document twice, with the full KV
# cache and with SLAKE at C=256, and says what each held. Without the model (no network at set-up)
# it falls back to greedy text from stories260K in ../shared. SLAKE_MODEL=FILE picks another model;
# extra arguments go to slake-cli's answer (e.g. -n 200, --temp 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cli=build/bin/slake-cli
model=${SLAKE_MODEL:-models/downloads/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -e "$model" ]; then
  fallback=../shared/models/stories260K.gguf
  if [ -z "${SLAKE_MODEL:-}" ] && [ -e "$fallback" ]; then
    echo "run: $model is missing (the set-up could not fetch it); greedy text from $fallback instead" >&2
    exec "$cli" -m "$fallback" -c 512 -n 256 --temp 0 "$@"
  fi
  echo "error: model $model not found; set SLAKE_MODEL to a GGUF file or Hugging Face directory" >&2
  exit 1
fi

question="What is the capital of France? Answer in one sentence."
echo "== $question"
echo "" | "$cli" -m "$model" --conversation -p "$question" -n 64 --temp 0 "$@" 2>/dev/null

doc=../shared/text/wikitext2-test.txt
if [ -e "$doc" ]; then
  text=$(head -c 14000 "$doc")
  echo
  echo "== The first 14 KB of wikitext-2 (about 3,500 tokens) read with the full cache, then with SLAKE at C=256:"
  for kv in "--kv-policy full" "--kv-policy slake --kv-budget 256"; do
    # shellcheck disable=SC2086  # the policy flags split into words on purpose
    line=$("$cli" -m "$model" -c 4096 -p "$text" -n 16 --temp 0 $kv 2>&1 >/dev/null | grep '^KV cache:' || true)
    printf '  %-36s %s\n' "$kv" "${line:-(no KV line)}"
  done
fi
