#!/usr/bin/env bash
# Set-up, build, and the main job on the built-in default: greedy generation from the tiny trained
# Llama in ../shared (stories260K). Extra arguments go to slake-cli (e.g. -n 400, --temp 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=${SLAKE_MODEL:-../shared/models/stories260K.gguf}
if [ ! -e "$model" ]; then
  echo "error: default model $model not found; set SLAKE_MODEL to a GGUF file or Hugging Face directory" >&2
  exit 1
fi
exec build/bin/slake-cli -m "$model" -c 512 -n 256 --temp 0 "$@"
