#!/usr/bin/env bash
# Runs tests/quality/test_kv_quality.py with the project's Python venv (scripts/setup.sh makes it).
# Exits 77 (ctest's SKIP_RETURN_CODE) when there is no venv.
set -u
py=$1
if [ ! -x "$py" ]; then echo "skipped: no Python venv at $py (scripts/setup.sh makes it)"; exit 77; fi
export PYTHONDONTWRITEBYTECODE=1 SLAKE_BIN_DIR=$2 SLAKE_SHARED_DIR=$3
exec "$py" "$(dirname "$0")/test_kv_quality.py" -v
