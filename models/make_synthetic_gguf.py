#!/usr/bin/env python3
"""Writes a synthetic Llama-shaped GGUF model (random weights) for speed comparisons.

Shapes (--shape): tinyllama-1.1b (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab
32000) and llama-3.2-1b (dim 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, the
output tied to the embedding table, RoPE base 500000 without Llama 3's frequency factors), in the
layout llama.cpp's convert_hf_to_gguf.py writes for Llama, so llama.cpp and slake load the same
file. Every 2-D tensor (token_embd and output included) has the chosen type; norms are F32.
Weights are N(0, 0.02^2), norms 1, so activations stay O(1); the numbers mean nothing, only
latency and memory do. The vocabulary is synthetic too: <unk>, <s>, </s>, the 256 byte tokens,
then filler pieces.

  python models/make_synthetic_gguf.py --type q4_0 --ctx 32768 --out tinyllama-q4_0.gguf
  python models/make_synthetic_gguf.py --shape llama-3.2-1b --type f16 --out llama-3.2-1b-f16.gguf

Needs numpy and gguf (models/requirements-reference.txt).
"""

import argparse
from pathlib import Path

import gguf
import numpy as np

# vocab, dim, layers, heads, KV heads, FFN, RoPE base, tied output
SHAPES = {
    "tinyllama-1.1b": (32000, 2048, 22, 32, 4, 5632, 10000.0, False),
    "llama-3.2-1b": (128256, 2048, 16, 32, 8, 8192, 500000.0, True),
}

TYPES = {
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}


def vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    TT = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TT.UNKNOWN, TT.CONTROL, TT.CONTROL] + [TT.BYTE] * 256
    while len(tokens) < n_vocab:
        tokens.append(f"\u2581t{len(tokens)}")
        types.append(TT.NORMAL)
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores, [int(t) for t in types]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--shape", default="tinyllama-1.1b", choices=sorted(SHAPES))
    ap.add_argument("--ctx", type=int, default=2048, help="llama.context_length (default 2048, TinyLlama's)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    qtype, ftype = TYPES[args.type]
    N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, rope_base, tied = SHAPES[args.shape]
    HEAD_DIM = N_EMBD // N_HEAD
    rng = np.random.default_rng(args.seed)

    w = gguf.GGUFWriter(str(args.out), "llama")
    w.add_name(f"synthetic {args.shape} {args.type}")
    w.add_context_length(args.ctx)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(ftype)
    tokens, scores, types = vocab(N_VOCAB)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def matrix(name: str, rows: int, cols: int) -> None:
        a = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(N_EMBD, dtype=np.float32))

    matrix("token_embd.weight", N_VOCAB, N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        matrix(p + "attn_q.weight", N_EMBD, N_EMBD)
        matrix(p + "attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        matrix(p + "attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
        matrix(p + "attn_output.weight", N_EMBD, N_EMBD)
        norm(p + "ffn_norm.weight")
        matrix(p + "ffn_gate.weight", N_FF, N_EMBD)
        matrix(p + "ffn_up.weight", N_FF, N_EMBD)
        matrix(p + "ffn_down.weight", N_EMBD, N_FF)
        print(f"\rlayer {i + 1}/{N_LAYER}", end="", flush=True)
    norm("output_norm.weight")
    if not tied:
        matrix("output.weight", N_VOCAB, N_EMBD)
    print()

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
