#!/usr/bin/env python3
"""Reference fixtures for the model families beyond Llama: tiny random Qwen2, Qwen3 and Gemma 3
models, made the way a user's files are made.

transformers builds each model from a config, with random weights drawn here (biases and
per-head norm weights far from 0 and 1, so that leaving one out changes the logits), and saves
it (save_pretrained, with a byte-level BPE tokenizer so that the converter accepts the
directory); llama.cpp's own convert_hf_to_gguf.py (in the PyPI sdist of llama-cpp-python
0.3.36, which vendors llama.cpp of 2026-10-01 and its gguf-py; never committed) turns the
directory into model.gguf (f32). The converter cannot recognise the tiny tokenizer's
pre-tokenizer by its hash, so it is run with get_vocab_base_pre answering "qwen2"; every tensor
and key it writes is its own. transformers' float32 logits (eager attention) for a 64-token
prompt are the reference. The output has the layout of models/make_test_models.py:

  models/NAME/hf/, models/NAME/model.gguf, models/NAME/reference.json, models/NAME/logits.f32

Models (vocab 272: the tokenizer's 256 byte tokens and its specials; hidden 64, 2 layers, FFN 128, rms_norm_eps 1e-5, untied):
  qwen2-bias    Qwen2ForCausalLM, 4 / 2 heads: Q/K/V projections with biases.
  qwen3-qknorm  Qwen3ForCausalLM, 4 / 2 heads of head_dim 32 (not hidden / heads = 16): per-head
                RMSNorm of Q and K (q_norm, k_norm) before RoPE.
  gemma3-swa    Gemma3ForCausalLM, 6 layers (five sliding of window 8, then one global, llama.cpp's
                default pattern), 4 / 2 heads of head_dim 32, RoPE bases 10000 (sliding) and 1e6
                (global), GELU-tanh, post-norms, scaled and tied embeddings; vocab 256 (the
                converter trims the embedding to the tokenizer's 256 tokens).
  gemma2-softcap Gemma2ForCausalLM, 4 layers (sliding of window 8 and global, alternating, llama.cpp's
                default pattern), 4 / 2 heads of head_dim 32, GELU-tanh, post-norms, scaled and tied
                embeddings, and soft-capped logits: attention 4 and output 2 (Gemma 2 ships 50 and 30,
                which these small random logits would never reach).
  phi3-longrope Phi3ForCausalLM, 4 / 2 heads, fused qkv_proj and gate_up_proj, LongRoPE with an
                original context of 32 in 128: the 64-token prompt takes the long factors (transformers
                by the sequence, the engine and llama.cpp by the context size, 64 here) and cos and
                sin are scaled by sqrt(1 + ln 4 / ln 32).
  mixtral-moe   MixtralForCausalLM, 4 / 2 heads, 4 experts of FFN 128, 2 per token (llama.cpp: a llama
                file with experts).
  qwen3-moe     Qwen3MoeForCausalLM, 4 / 2 heads of head_dim 32 with Q/K norms, 4 experts of FFN 96, 2
                per token, renormalised (norm_topk_prob, as Qwen3-30B-A3B and as llama.cpp always does).
  qwen2-moe     Qwen2MoeForCausalLM, 4 / 2 heads with Q/K/V biases, 4 experts of FFN 96, 2 per token, not
                renormalised (norm_topk_prob false, as Qwen1.5-MoE and as llama.cpp always does), and a
                shared expert of FFN 160 behind a sigmoid gate.
  For the mixtures, reference.json also holds transformers' router logits and the experts it
  chose for every token of every layer; every expert must be chosen somewhere, and permuting the
  router's rows must move the logits.

CI does not run this script (torch is too heavy); its outputs are committed. Regenerate with

    python -m venv /tmp/ref && /tmp/ref/bin/pip install -r models/requirements-reference.txt
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcp && tar xzf /tmp/lcp/*.tar.gz -C /tmp/lcp
    /tmp/ref/bin/python models/make_family_models.py --llama-cpp /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp --out tests/fixtures
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, MixtralConfig, MixtralForCausalLM, Phi3Config, Phi3ForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

N_VOCAB, N_EMBD, N_LAYER, N_FF, N_TOKENS = 272, 64, 2, 128, 64  # 256 byte tokens + room for specials

# Runs convert_hf_to_gguf.py as __main__ with the pre-tokenizer check answered (see above).
CONVERT = r"""
import sys
sys.path.insert(0, sys.argv[1] + "/gguf-py")
sys.path.insert(0, sys.argv[1])
import conversion.base
import conversion.phi
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
# Phi-3's and Gemma 2's converters read a SentencePiece tokenizer.model unless the directory names
# GPT2Tokenizer.
conversion.phi.Phi3MiniModel.set_vocab = lambda self: self._set_vocab_gpt2()
import conversion.gemma
conversion.gemma.Gemma2Model.set_vocab = lambda self: self._set_vocab_gpt2()
import convert_hf_to_gguf
sys.argv = [sys.argv[1] + "/convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
"""

def tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=None)


GEMMA_VOCAB, GEMMA_LAYERS, GEMMA_WINDOW = 256, 6, 8
GEMMA2_LAYERS, GEMMA2_ATTN_CAP, GEMMA2_FINAL_CAP = 4, 4.0, 2.0


def gemma2_config(attn_cap: float | None, final_cap: float | None, window: int = GEMMA_WINDOW) -> Gemma2Config:
    return Gemma2Config(vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF, num_hidden_layers=GEMMA2_LAYERS,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
                        max_position_embeddings=128, rms_norm_eps=1e-6, sliding_window=window,
                        layer_types=["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(GEMMA2_LAYERS)],
                        attn_logit_softcapping=attn_cap, final_logit_softcapping=final_cap, tie_word_embeddings=True,
                        attn_implementation="eager")


PHI3_SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
PHI3_LONG = [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 20.0]


def phi3_config(long_factor: list[float]) -> Phi3Config:
    return Phi3Config(vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF, num_hidden_layers=N_LAYER,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      original_max_position_embeddings=32, rms_norm_eps=1e-5, sliding_window=None,
                      rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI3_SHORT,
                                       "long_factor": long_factor, "original_max_position_embeddings": 32},
                      tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager")


def n_vocab(name: str) -> int:
    return GEMMA_VOCAB if name.startswith("gemma3") else N_VOCAB


def build(name: str, seed: int):
    common = dict(vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF, num_hidden_layers=N_LAYER,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                  rope_theta=10000.0, tie_word_embeddings=False, attn_implementation="eager")
    if name == "qwen2-bias":
        model = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **common))
    elif name == "gemma3-swa":
        cfg = Gemma3TextConfig(
            vocab_size=GEMMA_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF, num_hidden_layers=GEMMA_LAYERS,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
            max_position_embeddings=128, rms_norm_eps=1e-6, sliding_window=GEMMA_WINDOW,
            layer_types=["full_attention" if l % 6 == 5 else "sliding_attention" for l in range(GEMMA_LAYERS)],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
            tie_word_embeddings=True, attn_implementation="eager")
        model = Gemma3ForCausalLM(cfg)
    elif name == "gemma2-softcap":
        model = Gemma2ForCausalLM(gemma2_config(GEMMA2_ATTN_CAP, GEMMA2_FINAL_CAP))
    elif name == "mixtral-moe":
        model = MixtralForCausalLM(MixtralConfig(num_local_experts=4, num_experts_per_tok=2, sliding_window=None, **common))
    elif name == "qwen3-moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(head_dim=32, moe_intermediate_size=96, num_experts=4, num_experts_per_tok=2,
                                                   norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                                   attention_bias=False, **common))
    elif name == "qwen2-moe":
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(moe_intermediate_size=96, shared_expert_intermediate_size=160, num_experts=4,
                                                   num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
                                                   mlp_only_layers=[], use_sliding_window=False, **common))
    elif name == "phi3-longrope":
        model = Phi3ForCausalLM(phi3_config(PHI3_LONG))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=32, attention_bias=False, **common))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):  # Gemma's are w in x * (1 + w): the same draw gives ~2
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5))
    return model.eval()


def routing(model, tokens: list[int]) -> dict:
    """transformers' router logits per layer and token, and the experts its top-k picks from them."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens]), output_router_logits=True)
    k = model.config.num_experts_per_tok
    logits = [r.reshape(len(tokens), -1).float() for r in out.router_logits]
    chosen = [torch.topk(torch.softmax(r, dim=-1), k, dim=-1).indices.tolist() for r in logits]
    return {"router_logits": [r.tolist() for r in logits], "experts": chosen}


def logits_of(model, tokens: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0].float().numpy()


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def make(name: str, seed: int, llama_cpp: Path, root: Path) -> None:
    out = root / "models" / name
    shutil.rmtree(out, ignore_errors=True)
    (out / "hf").mkdir(parents=True)
    model = build(name, seed)
    model.save_pretrained(out / "hf", safe_serialization=True)
    tokenizer().save_pretrained(out / "hf")
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(0, n_vocab(name), N_TOKENS)]
    logits = logits_of(model, tokens)
    extra = {}
    if name.endswith("-moe"):
        extra = routing(model, tokens)
        for l, chosen in enumerate(extra["experts"]):
            if len({e for tok in chosen for e in tok}) < 4:
                sys.exit(f"{name}: layer {l} leaves an expert unused")
        with torch.no_grad():
            permuted = type(model)(model.config)
            permuted.load_state_dict(model.state_dict())
            for pname, p in permuted.named_parameters():
                if pname.endswith("mlp.gate.weight") or pname.endswith("block_sparse_moe.gate.weight"):
                    p.copy_(p.flip(0))
            if not rel_err(logits_of(permuted.eval(), tokens), logits) > 1e-2:
                sys.exit(f"{name}: the router does not move the logits")
            if name == "qwen2-moe":  # and the shared expert
                alone = type(model)(model.config)
                alone.load_state_dict(model.state_dict())
                for pname, p in alone.named_parameters():
                    if "shared_expert.down_proj" in pname:
                        p.zero_()
                if not rel_err(logits_of(alone.eval(), tokens), logits) > 1e-2:
                    sys.exit(f"{name}: the shared expert does not move the logits")
    # The feature under test moves the logits: without it they differ. (Gemma: the post-norms and
    # the sliding window.)
    with torch.no_grad():
        if name.startswith("phi3"):
            short = Phi3ForCausalLM(phi3_config(PHI3_SHORT))
            short.load_state_dict(model.state_dict())
            if not rel_err(logits_of(short.eval(), tokens), logits) > 1e-2:
                sys.exit(f"{name}: the long RoPE factors do not move the logits")
        if name.startswith("gemma3"):
            wide = Gemma3ForCausalLM(Gemma3TextConfig(**{**model.config.to_dict(), "sliding_window": 128}))
            wide.load_state_dict(model.state_dict())
            if not rel_err(logits_of(wide.eval(), tokens), logits) > 1e-2:
                sys.exit(f"{name}: the sliding window does not move the logits")
        if name.startswith("gemma2"):  # the window and each cap on its own
            for what, cfg in (("the sliding window", gemma2_config(GEMMA2_ATTN_CAP, GEMMA2_FINAL_CAP, 128)),
                              ("the attention soft-cap", gemma2_config(None, GEMMA2_FINAL_CAP)),
                              ("the final soft-cap", gemma2_config(GEMMA2_ATTN_CAP, None))):
                other = Gemma2ForCausalLM(cfg)
                other.load_state_dict(model.state_dict())
                e = rel_err(logits_of(other.eval(), tokens), logits)
                if not e > 1e-2:
                    sys.exit(f"{name}: {what} moves the logits by only {e:.3g}")
        for pname, p in model.named_parameters():
            if pname.endswith(".bias") or pname.endswith("q_norm.weight") or pname.endswith("k_norm.weight"):
                p.copy_(torch.zeros_like(p) if pname.endswith(".bias") else torch.ones_like(p))
            if "post_" in pname and pname.endswith("layernorm.weight"):
                p.copy_(torch.zeros_like(p))
    e = rel_err(logits_of(model, tokens), logits)
    if not e > 1e-2 and name not in ("phi3-longrope", "mixtral-moe"):
        sys.exit(f"{name}: the biases / QK norms / post-norms move the logits by only {e:.3g}")
    subprocess.run([sys.executable, "-c", CONVERT, str(llama_cpp), str(out / "hf"), "--outtype", "f32", "--outfile",
                    str(out / "model.gguf")], check=True, stdout=subprocess.DEVNULL)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (out / "hf" / f).unlink(missing_ok=True)  # the engine's tests need the weights only
    logits.astype("<f4").tofile(out / "logits.f32")
    desc = {"qwen2-bias": "Qwen2ForCausalLM, 4/2 heads, Q/K/V biases",
            "qwen3-qknorm": "Qwen3ForCausalLM, 4/2 heads of head_dim 32, per-head Q/K RMSNorm",
            "gemma3-swa": "Gemma3ForCausalLM, 6 layers (5 sliding of window 8, 1 global), 4/2 heads of head_dim 32, "
                          "RoPE 1e4/1e6, GELU-tanh, post-norms, scaled tied embeddings",
            "gemma2-softcap": "Gemma2ForCausalLM, 4 layers (sliding of window 8 and global, alternating), 4/2 heads of head_dim 32, "
                              "GELU-tanh, post-norms, scaled tied embeddings, logits soft-capped at 4 (attention) and 2 (output)",
            "phi3-longrope": "Phi3ForCausalLM, 4/2 heads, fused QKV and gate-up, LongRoPE (original context 32 of 128)",
            "mixtral-moe": "MixtralForCausalLM, 4/2 heads, 4 experts, 2 per token",
            "qwen3-moe": "Qwen3MoeForCausalLM, 4/2 heads of head_dim 32, Q/K norms, 4 experts of 96, 2 per token, renormalised",
            "qwen2-moe": "Qwen2MoeForCausalLM, 4/2 heads, Q/K/V biases, 4 experts of 96, 2 per token, a shared expert of 160 "
                         "behind a sigmoid gate"}[name]
    (out / "reference.json").write_text(json.dumps({"tokens": tokens, "n_vocab": n_vocab(name), "description": desc +
                                                    "; GGUF by llama.cpp's convert_hf_to_gguf.py (f32)", **extra}) + "\n")
    print(f"{name}: {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures"))
    names = {"qwen2-bias": 101, "qwen3-qknorm": 102, "gemma3-swa": 103, "phi3-longrope": 104, "mixtral-moe": 105, "qwen3-moe": 106, "qwen2-moe": 111,
             "gemma2-softcap": 112}
    ap.add_argument("--only", choices=sorted(names), help="make this fixture alone")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, seed in names.items():
        if a.only in (None, name):
            make(name, seed, a.llama_cpp, a.out)


if __name__ == "__main__":
    main()
