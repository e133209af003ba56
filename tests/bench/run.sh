#!/usr/bin/env bash
# Runs tests/bench/test_plot.py with the project's Python venv (scripts/setup.sh makes it, with
# tools/bench/requirements.txt). Exits 77 (ctest's SKIP_RETURN_CODE) when there is no venv.
set -u
py=$1
if [ ! -x "$py" ]; then echo "skipped: no Python venv at $py (scripts/setup.sh makes it)"; exit 77; fi
export PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
exec "$py" "$(dirname "$0")/test_plot.py" -v
