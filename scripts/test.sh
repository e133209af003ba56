#!/usr/bin/env bash
# Set-up, build and every test: what CI runs (.ci/run). Tests that need ../shared skip without it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
