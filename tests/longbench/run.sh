#!/usr/bin/env bash
# Runs one module of the LongBench tests (tests/longbench/test_*.py) with the project's Python venv.
#   run.sh VENV_PYTHON BIN_DIR SHARED_DIR MODULE [needs-shared]
# Exits 77 (ctest's SKIP_RETURN_CODE) when the venv is missing (scripts/setup.sh makes it) or, with
# needs-shared, when ../shared lacks what the module runs on.
set -u
py=$1 bin=$2 shared=$3 module=$4 needs=${5:-}
if [ ! -x "$py" ]; then echo "skipped: no Python venv at $py (scripts/setup.sh makes it)"; exit 77; fi
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")  # the cd below must not change what it names
bin=$(cd "$bin" 2>/dev/null && pwd || echo "$bin")
shared=$(cd "$shared" 2>/dev/null && pwd || echo "$shared")
if [ "$needs" = needs-shared ]; then
  for f in "$shared/models/stories260K.gguf" "$shared/models/tok512.bin" "$shared/longbench/dataset2prompt.json" \
           "$shared/longbench/dataset2maxlen.json"; do
    if [ ! -e "$f" ]; then echo "skipped: shared material missing: $f"; exit 77; fi
  done
fi
export SLAKE_BIN_DIR=$bin SLAKE_SHARED_DIR=$shared PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")" && exec "$py" -m unittest -v "$module"
