#!/usr/bin/env bash
# Runs a module of the slake-server tests (tests/server/*.py) with the project's Python venv.
#   run.sh VENV_PYTHON BIN_DIR SHARED_DIR MODELS_DIR MODULE [ARGS...]   (python MODULE.py ARGS, at most 600 s)
# Exits 77 (ctest's SKIP_RETURN_CODE) when the venv (scripts/setup.sh makes it) or the openai
# client in it is missing, or ../shared lacks stories260K.
set -u
py=$1 bin=$2 shared=$3 models=$4 module=$5
shift 5
if [ ! -x "$py" ]; then echo "skipped: no Python venv at $py (scripts/setup.sh makes it)"; exit 77; fi
if ! "$py" -c 'import openai' 2>/dev/null; then echo "skipped: no openai client in $py (scripts/setup.sh installs it)"; exit 77; fi
if [ ! -e "$shared/models/stories260K.gguf" ]; then echo "skipped: shared material missing: $shared/models/stories260K.gguf"; exit 77; fi
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
models=$(cd "$models" 2>/dev/null && pwd || echo "$models")
export SLAKE_BIN_DIR=$(cd "$bin" && pwd) SLAKE_SHARED_DIR=$(cd "$shared" && pwd) SLAKE_MODELS_DIR=$models PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")" && exec timeout 600 "$py" "$module.py" "$@"
