#!/usr/bin/env python3
"""Reference fixtures for SmolLM2-135M-Instruct (the project's real test model, fetched by
scripts/fetch-models.sh into models/downloads/), made with Hugging Face transformers, which
shares no code with slake: it reads the GGUF file with the `gguf` package, dequantises every
tensor to float32 and runs LlamaForCausalLM (eager attention, float32).

    pip install -r models/requirements-reference.txt
    python models/make_smollm2_references.py --models models/downloads --shared ../shared \\
        --out tests/fixtures/smollm2

Output, under --out:

  tokenizer-tinyshakespeare.txt  line k: the token ids of line k of
                    ../shared/text/tinyshakespeare.txt (without its newline), no BOS.
  tokenizer-cases.json  [{"text", "add_special", "parse_special", "ids"}]: unicode, digits,
                    whitespace runs and special-token cases.
  logits.json       {"texts": [{"source", "ids"}] (4 texts x 512 tokens), "top_k", and the
                    statistics of the emulated-quantisation run below}
  logits-top.bin    for every text and position, little-endian: float32 logsumexp of the
                    logits, then top_k x (int32 id, float32 logit), highest first.
  greedy.json       [{"prompt", "ids", "continuation"}]: 32 greedy tokens (argmax of the raw
                    logits, going on past an end-of-text token) after each of 5
                    prompts, from the F16 rewrite of the file (transformers over the same F16
                    weights the engine reads).

The tokenizer: transformers builds it from the GGUF vocabulary and merges; its pre-tokenizer is
then set to SmolLM2's published one (Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False)]), which the GGUF conversion does not carry.

The logits' bound: the engine quantises the input of every product with a quantised weight
matrix per block of 32 (Q8_0 quants, as llama.cpp). The script runs the reference a second time
with exactly that rounding applied to every linear layer's input (forward pre-hooks), and records
KL(float || rounded) and the top-1 agreement: what activation quantisation alone costs. The
engine's test bounds its own divergence from the float reference by twice that KL, computed the
same way (over the reference's top-64 tokens and one bucket for the rest of the vocabulary).
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

Q41 = "SmolLM2-135M-Instruct.Q4_1.gguf"
F16 = "SmolLM2-135M-Instruct.F16.gguf"
TOP_K = 64
N_TOKENS = 512

EXTRA_CASES = [
    ("Hello world", False, False),
    (" Hello world", False, False),
    ("Hello  world\n\n\nbye  ", False, False),
    ("\t tab\ttab \r\n crlf", False, False),
    ("3.14159 and 1,000,000 and 2024-11-24 and x=42", False, False),
    ("   leading and trailing   ", False, False),
    ("I'm sure you've seen it; they'll say 'don't'.", False, False),
    ("ÄÖÜ äöü ß — naïve café résumé", False, False),
    ("日本語のテキスト、中文文本，한국어 텍스트", False, False),
    ("emoji 🦙🚀 and 👩‍👩‍👧 families", False, False),
    ("Ελληνικά και русский текст", False, False),
    ("def f(x):\n    return x ** 2  # square\n", False, False),
    ("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", False, True),
    ("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", False, False),
    ("<|endoftext|>text after<|endoftext|>", False, True),
    ("Hello world", True, False),
    ("", False, False),
    ("   ", False, False),
    ("\n", False, False),
]

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
]


def reference_tokenizer(models: Path):
    tok = AutoTokenizer.from_pretrained(str(models), gguf_file=Q41)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    return tok


def encode(tok, text: str, add_special: bool, parse_special: bool) -> list[int]:
    if parse_special:
        return tok(text, add_special_tokens=add_special).input_ids
    # Special-token text as plain text: the backend without its added-token matching.
    ids = tok.backend_tokenizer.encode(text, add_special_tokens=add_special, split_special_tokens=True).ids \
        if "split_special_tokens" in tok.backend_tokenizer.encode.__doc__ else None
    if ids is None:
        tok.split_special_tokens = True
        ids = tok(text, add_special_tokens=add_special).input_ids
        tok.split_special_tokens = False
    return ids


def q8_0_round(x: torch.Tensor) -> torch.Tensor:
    """Each row's blocks of 32 rounded as the engine's Q8_0/Q8_1 activations: d = amax / 127
    rounded to fp16, quants round(x / d_fp32) half to even, values q * d_fp16."""
    shape = x.shape
    b = x.reshape(-1, 32).to(torch.float32)
    amax = b.abs().amax(dim=1, keepdim=True)
    d = amax / 127.0
    inv = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    q = torch.round(b * inv)  # torch.round: half to even
    d16 = d.to(torch.float16).to(torch.float32)
    return (q * d16).reshape(shape)


def top_logits(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lse = torch.logsumexp(logits.double(), dim=-1).float()
    vals, ids = torch.topk(logits, TOP_K, dim=-1)
    return lse.numpy(), ids.numpy().astype(np.int32), vals.numpy().astype(np.float32)


def kl_and_top1(ref: torch.Tensor, other: torch.Tensor) -> tuple[float, float, float]:
    """Mean KL(ref || other) over the whole vocabulary, the same KL over the reference's top-k
    tokens and one bucket for the rest (what the engine's test can compute from logits-top.bin;
    never more than the full KL), and the top-1 agreement."""
    lp = torch.log_softmax(ref.double(), -1)
    lq = torch.log_softmax(other.double(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    ids = ref.topk(TOP_K, -1).indices
    p, q = lp.gather(-1, ids).exp(), lq.gather(-1, ids).exp()
    rp, rq = (1 - p.sum(-1)).clamp_min(1e-300), (1 - q.sum(-1)).clamp_min(1e-300)
    kl_top = (p * (p.log() - q.log())).sum(-1) + rp * (rp.log() - rq.log())
    top1 = (ref.argmax(-1) == other.argmax(-1)).double()
    return float(kl.mean()), float(kl_top.mean()), float(top1.mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--shared", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    a.out.mkdir(parents=True, exist_ok=True)

    tok = reference_tokenizer(a.models)
    lines = (a.shared / "text" / "tinyshakespeare.txt").read_text(encoding="utf-8").split("\n")
    with open(a.out / "tokenizer-tinyshakespeare.txt", "w") as f:
        for line in lines:
            f.write(" ".join(map(str, tok(line, add_special_tokens=False).input_ids)) + "\n")
    cases = [{"text": t, "add_special": s, "parse_special": p, "ids": encode(tok, t, s, p)} for t, s, p in EXTRA_CASES]
    (a.out / "tokenizer-cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    print(f"tokenizer: {len(lines)} lines, {len(cases)} cases")

    # Four 512-token texts: two of WikiText-2, two of Tiny Shakespeare, from fixed offsets.
    wiki = (a.shared / "text" / "wikitext2-test.txt").read_text(encoding="utf-8")
    shak = "\n".join(lines)
    texts = []
    for source, text, offset in (("wikitext2-test.txt", wiki, 0), ("wikitext2-test.txt", wiki, 200000),
                                 ("tinyshakespeare.txt", shak, 0), ("tinyshakespeare.txt", shak, 500000)):
        ids = tok(text[offset:offset + 8000], add_special_tokens=False).input_ids[:N_TOKENS]
        assert len(ids) == N_TOKENS
        texts.append({"source": source, "char_offset": offset, "ids": ids})

    model = AutoModelForCausalLM.from_pretrained(str(a.models), gguf_file=Q41, dtype=torch.float32)
    model.eval()
    model.config._attn_implementation = "eager"
    kls, kls_top, top1s = [], [], []
    with open(a.out / "logits-top.bin", "wb") as f, torch.no_grad():
        for t in texts:
            x = torch.tensor([t["ids"]])
            ref = model(x).logits[0]
            lse, ids, vals = top_logits(ref)
            for p in range(N_TOKENS):
                f.write(struct.pack("<f", float(lse[p])))
                f.write(np.stack([ids[p].view(np.float32), vals[p]], axis=1).astype("<f4").tobytes())
            hooks = [m.register_forward_pre_hook(lambda mod, args: (q8_0_round(args[0]),))
                     for m in model.modules() if isinstance(m, torch.nn.Linear)]
            rounded = model(x).logits[0]
            for h in hooks:
                h.remove()
            kl, kl_top, top1 = kl_and_top1(ref, rounded)
            kls.append(kl)
            kls_top.append(kl_top)
            top1s.append(top1)
            tail = 1.0 - torch.softmax(ref.double(), -1).topk(TOP_K, -1).values.sum(-1)
            print(f"  {t['source']}@{t['char_offset']}: KL(float || q8 inputs) {kl:.5f} (top-{TOP_K} + rest: {kl_top:.5f}), top-1 {top1:.4f}, "
                  f"mass outside top-{TOP_K}: mean {float(tail.mean()):.4f}")
    summary = {"model": Q41, "top_k": TOP_K, "n_tokens": N_TOKENS, "texts": texts,
               "q8_inputs_mean_kl": float(np.mean(kls)), "q8_inputs_mean_kl_top": float(np.mean(kls_top)),
               "q8_inputs_top1": float(np.mean(top1s)),
               "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    (a.out / "logits.json").write_text(json.dumps(summary) + "\n")
    print(f"logits: mean KL(float || q8 inputs) {summary['q8_inputs_mean_kl']:.5f}, top-1 {summary['q8_inputs_top1']:.4f}")

    model16 = AutoModelForCausalLM.from_pretrained(str(a.models), gguf_file=F16, dtype=torch.float32)
    model16.eval()
    greedy = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tok(prompt, add_special_tokens=False).input_ids
            seq = list(ids)
            for _ in range(32):  # argmax of the raw logits, end-of-text included (no generate() processors)
                seq.append(int(model16(torch.tensor([seq])).logits[0, -1].argmax()))
            greedy.append({"prompt": prompt, "ids": ids, "continuation": seq[len(ids):]})
            print(f"  greedy: {prompt!r} -> {tok.decode(greedy[-1]['continuation'])!r}")
    (a.out / "greedy.json").write_text(json.dumps(greedy, ensure_ascii=False, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
