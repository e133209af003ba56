#!/usr/bin/env python3
"""Reference fixtures for Gemma-3-270M (the project's second real test model, a Q4_K_M GGUF
fetched by scripts/fetch-models.sh into models/downloads/), from llama.cpp of 2026-10-01 (the
copy vendored in the PyPI sdist of llama-cpp-python 0.3.36), built beside the project with AMX
off and never committed:

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcp && tar xzf /tmp/lcp/*.tar.gz -C /tmp/lcp
    cd /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp && cmake -B build -DLLAMA_CURL=OFF \\
        -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \\
      && cmake --build build -j2 --target llama-completion llama-perplexity llama-tokenize
    python3 models/make_gemma3_references.py --bin /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \\
        --model models/downloads/gemma-3-270m-q4_k_m.gguf --shared ../shared --out tests/fixtures/gemma3-270m

Output, under --out:

  tokenizer.json   {"tinyshakespeare": {"count", "fnv1a64", "head"}}: llama-tokenize's ids of the whole
                   of ../shared/text/tinyshakespeare.txt without BOS (their count, the FNV-1a 64 hash of
                   their little-endian int32 bytes as a hex string, the first 64), and "cases":
                   [{"text", "parse_special", "ids"}] (with BOS) for unicode, digits, whitespace runs,
                   code and Gemma's control tokens.
  greedy.json      [{"prompt" | "prompt_file" + "prompt_bytes", "continuation"}]: llama-completion's
                   32 greedy tokens (temperature 0, EOS ignored, 2 threads) after each prompt, as text.
                   One prompt (the first 2600 bytes of Tiny Shakespeare) is longer than the 512-token sliding window.
  perplexity.json  llama-perplexity on ../shared/text/wikitext2-test.txt, -c 512, for 4 and 20 chunks.
"""
from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
from pathlib import Path

PROMPTS = [
    "The capital of France is",
    "The three primary colours of light are",
    "def fibonacci(n):\n",
    "La tour Eiffel se trouve",
]
# The first bytes of Tiny Shakespeare (cut back to a character boundary): more tokens than the
# 512-token window. (Not wikitext: its literal "<unk>" is Gemma's UNK token to llama-completion,
# which parses special tokens in prompts, and the model's continuations after such prompts are
# near-ties between unlikely tokens.)
LONG_FILE, LONG_BYTES = "text/tinyshakespeare.txt", 2600

CASES = [
    ("Hello world", False),
    (" Hello world", False),
    ("Hello\n\nworld  \t tabs   and    spaces", False),
    ("1234567890 3.14159 1,000,000", False),
    ("naïve café — über straße 東京 Москва 🙂🚀", False),
    ("    indented\n        code()\n", False),
    ("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", True),
    ("<start_of_turn>user\nHi<end_of_turn>", False),
    ("", False),
]


def fnv1a64(ids: list[int]) -> str:
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<i", i) for i in ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tokenize(bin_dir: Path, model: Path, text: str, bos: bool, special: bool) -> list[int]:
    args = [str(bin_dir / "llama-tokenize"), "-m", str(model), "--ids", "--log-disable", "--stdin"]
    if not bos:
        args.append("--no-bos")
    if not special:
        args.append("--no-parse-special")
    out = subprocess.run(args, input=text.encode(), capture_output=True, check=True).stdout.decode()
    return json.loads(out.strip().splitlines()[-1])


def complete(bin_dir: Path, model: Path, prompt: str) -> str:
    # -p, not -f: llama.cpp drops a prompt file's final newline.
    args = [str(bin_dir / "llama-completion"), "-m", str(model), "-p", prompt, "-n", "32", "--temp", "0",
            "--ignore-eos", "-c", "2048", "-t", "2", "--no-warmup", "--no-display-prompt", "-no-cnv"]
    out = subprocess.run(args, capture_output=True, check=True).stdout.decode()
    if not out.endswith("\n\n"):
        raise SystemExit("llama-completion's output lacks its closing blank line")
    return out[:-2]  # the two newlines llama-completion prints after the generated text


def perplexity(bin_dir: Path, model: Path, text: Path, chunks: int) -> float:
    args = [str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(text), "-c", "512", "--chunks", str(chunks), "-t", "2"]
    out = subprocess.run(args, capture_output=True, check=True, text=True)
    return float(re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr).group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--shared", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    shakespeare = (a.shared / "text/tinyshakespeare.txt").read_text()
    ids = tokenize(a.bin, a.model, shakespeare, bos=False, special=False)
    cases = [{"text": t, "parse_special": s, "ids": tokenize(a.bin, a.model, t, bos=True, special=s)} for t, s in CASES]
    tok = {"tinyshakespeare": {"count": len(ids), "fnv1a64": fnv1a64(ids), "head": ids[:64]}, "cases": cases}
    (a.out / "tokenizer.json").write_text(json.dumps(tok, indent=1, ensure_ascii=False) + "\n")

    greedy = [{"prompt": p, "continuation": complete(a.bin, a.model, p)} for p in PROMPTS]
    long = (a.shared / LONG_FILE).read_bytes()[:LONG_BYTES].decode("utf-8", errors="ignore")
    greedy.append({"prompt_file": LONG_FILE, "prompt_bytes": len(long.encode()),
                   "prompt_tokens": len(tokenize(a.bin, a.model, long, bos=True, special=False)),
                   "continuation": complete(a.bin, a.model, long)})
    (a.out / "greedy.json").write_text(json.dumps(greedy, indent=1, ensure_ascii=False) + "\n")

    wikitext = a.shared / "text/wikitext2-test.txt"
    ppl = {"text": "text/wikitext2-test.txt", "n_ctx": 512, "chunks": {str(c): perplexity(a.bin, a.model, wikitext, c) for c in (4, 20)}}
    (a.out / "perplexity.json").write_text(json.dumps(ppl, indent=1) + "\n")


if __name__ == "__main__":
    main()
