#!/usr/bin/env python3
"""Generate slake's reference fixtures: tiny random Llama/Mistral models in both
formats the engine loads, the logits Hugging Face transformers computes for them,
and raw quantisation blocks with their dequantised values.

Why: the C++ engine must agree with an implementation it shares no code with.
Every number the engine's tests compare against comes from transformers
(float32, eager attention) or from the `gguf` Python package, never from slake.
CI does not run this script (torch is too heavy); its outputs are committed.
Regenerate with

    pip install -r models/requirements-reference.txt
    python models/make_test_models.py --out tests/fixtures

Everything is seeded, and torch runs single-threaded, so a rerun with the same
package versions reproduces the same bytes.

Output, under --out:

  models/NAME/hf/          transformers `save_pretrained` output (safetensors +
                           config.json + generation_config.json); no tokenizer.
  models/NAME/model.gguf   the same weights written with gguf.GGUFWriter the way
                           llama.cpp's convert_hf_to_gguf.py writes a Llama model
                           (arch "llama", Q/K rows permuted, see below).
  models/NAME/reference.json  {"tokens": [64 ids], "n_vocab": V, "description"}
  models/NAME/logits.f32   little-endian float32, row-major [64][V]: the logits
                           of LlamaForCausalLM / MistralForCausalLM at every
                           position for input_ids = tokens (positions 0..63, no BOS).
  quant/quant.gguf         one tensor per type (Q4_0, Q8_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1,
                           Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS),
                           4 rows x 512 columns of random raw blocks whose fp16
                           scale fields are finite random values.
  quant/TYPE.f32           gguf.quants.dequantize of those bytes, float32 [4][512].

Models (vocab 256, hidden 64, 2 layers, FFN 128, rms_norm_eps 1e-5; RMSNorm
weights drawn around 1, not all ones, so norm handling is really exercised):

  llama2-mha            4 heads / 4 KV heads, untied output, theta 1e4. F32.
  llama-gqa-tied        8 / 2 heads, tied embeddings (GGUF has no output.weight),
                        hf/ sharded (>= 2 shards + model.safetensors.index.json).
  llama31-rope-scaling  4 / 2 heads, head_dim 16, theta 5e5, Llama-3.1 "llama3"
                        rope scaling with original_max_position_embeddings 64, so
                        the per-frequency factors are a mix of 1, smoothed and 8
                        at this head_dim; the GGUF carries rope_freqs.weight.
  mistral-swa           MistralForCausalLM, 4 / 2 heads, sliding_window 16 (< 64
                        tokens); GGUF key llama.attention.sliding_window = 16.
  llama2-mha-f16        weights rounded to fp16; hf/ saved in float16, GGUF 2-D
                        tensors F16, norms F32; reference = float32 model holding
                        the rounded values.
  llama2-mha-bf16       the same with bfloat16 (GGUF type BF16).
  llama2-mha-q8_0       GGUF only; every 2-D tensor (token_embd included) Q8_0,
  llama2-mha-q4_0       resp. Q4_0, norms F32; reference = float32 model holding
                        the dequantised weights, with the input of every linear
                        layer rounded to Q8_0 per 32 values (the gguf package's
                        quantiser), as llama.cpp's CPU backend computes.

Layout contract (checked at the end of every run by an independent numpy
forward pass over the tensors read back from each model.gguf; the script fails
if it disagrees with transformers by more than 1e-4 of max |logit|):

  * Tensors are stored as the HF [out, in] matrices (ggml ne0 = in).
  * attn_q / attn_k rows are permuted as convert_hf_to_gguf.py does, turning HF's
    rotate-half RoPE layout into adjacent pairs: per head, GGUF dims (2i, 2i+1)
    are one rotated pair, rotated by pos * theta^(-2i/head_dim) (divided by
    rope_freqs[i] when the tensor exists). attn_k uses the KV head count.
  * Query head h reads KV head h / (n_head / n_head_kv).

Sliding-window convention (transformers 5.x `masking_utils.sliding_window_overlay`:
`kv_idx > q_idx - sliding_window`, on top of the causal `kv_idx <= q_idx`):
query i sees key j iff  i - sliding_window < j <= i, i.e. exactly
`sliding_window` keys including itself. The script checks this three ways:
the logits differ from the same weights with sliding_window=None (only at
positions >= window), the numpy forward with that rule matches, and the numpy
forward with the window off by one in either direction does NOT match.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import gguf
from gguf import GGMLQuantizationType as QT
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
from transformers.utils import logging as hf_logging

N_VOCAB = 256
N_EMBD = 64
N_LAYER = 2
N_FF = 128
RMS_EPS = 1e-5
N_TOKENS = 64
RTOL = 1e-4  # numpy-vs-transformers tolerance, relative to max |logit|


@dataclass
class Spec:
    name: str
    seed: int
    n_head: int
    n_head_kv: int
    description: str
    head_dim: int | None = None
    arch: str = "llama"  # "llama" or "mistral" (transformers class); GGUF arch is always "llama"
    tied: bool = False
    rope_theta: float = 10000.0
    max_pos: int = 128
    rope_scaling: dict | None = None
    sliding_window: int | None = None
    wtype: str = "f32"  # f32, f16, bf16, q8_0, q4_0
    sharded: bool = False
    write_hf: bool = True


LLAMA2_DESC = "4 heads, 4 KV heads, untied output, rope_theta 1e4"

SPECS = [
    Spec("llama2-mha", 1, 4, 4, f"Llama-2 style MHA: {LLAMA2_DESC}. F32."),
    Spec("llama-gqa-tied", 2, 8, 2, "GQA 8 heads / 2 KV heads (head_dim 8), tied embeddings, "
         "rope_theta 1e4, hf/ sharded. F32.", tied=True, sharded=True),
    Spec("llama31-rope-scaling", 3, 4, 2, "Llama-3.1 style: 4 heads / 2 KV heads, head_dim 16, "
         "rope_theta 5e5, llama3 rope scaling (factor 8, low 1, high 4, original ctx 64); "
         "GGUF has rope_freqs.weight. F32.", head_dim=16, rope_theta=500000.0, max_pos=131072,
         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    Spec("mistral-swa", 4, 4, 2, "MistralForCausalLM: 4 heads / 2 KV heads, sliding_window 16 "
         "(query i sees keys i-15..i). F32.", arch="mistral", sliding_window=16),
    Spec("llama2-mha-f16", 5, 4, 4, f"Llama-2 style MHA ({LLAMA2_DESC}), weights rounded to "
         "float16; hf/ float16, GGUF 2-D tensors F16, norms F32; logits from the float32 model "
         "holding the rounded values.", wtype="f16"),
    Spec("llama2-mha-bf16", 6, 4, 4, f"Llama-2 style MHA ({LLAMA2_DESC}), weights rounded to "
         "bfloat16; hf/ bfloat16, GGUF 2-D tensors BF16, norms F32; logits from the float32 "
         "model holding the rounded values.", wtype="bf16"),
    Spec("llama2-mha-q8_0", 7, 4, 4, f"Llama-2 style MHA ({LLAMA2_DESC}), GGUF only: every 2-D "
         "tensor Q8_0 (token_embd included), norms F32; logits from the float32 model holding "
         "the dequantised weights, every linear layer's input rounded to Q8_0.", wtype="q8_0", write_hf=False),
    Spec("llama2-mha-q4_0", 8, 4, 4, f"Llama-2 style MHA ({LLAMA2_DESC}), GGUF only: every 2-D "
         "tensor Q4_0 (token_embd included), norms F32; logits from the float32 model holding "
         "the dequantised weights, every linear layer's input rounded to Q8_0.", wtype="q4_0", write_hf=False),
]

FILE_TYPE = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
}
QUANT_OF = {"q8_0": QT.Q8_0, "q4_0": QT.Q4_0}


def fail(msg: str) -> None:
    print(f"FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond: bool, msg: str) -> None:
    if not cond:
        fail(msg)


# ---------------------------------------------------------------------------
# llama.cpp conventions


def permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half -> adjacent pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """Inverse of permute()."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rope: dict, theta: float, head_dim: int) -> np.ndarray:
    """LlamaModel.generate_extra_tensors (convert_hf_to_gguf.py), rope_type "llama3"."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor = rope.get("factor", 8.0)
    low_freq_factor = rope.get("low_freq_factor", 1.0)
    high_freq_factor = rope.get("high_freq_factor", 4.0)
    old_context_len = rope.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    assert low_freq_wavelen != high_freq_wavelen
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(rope_factors, dtype=torch.float32).numpy()


# HF parameter name (per layer) -> GGUF tensor name
LAYER_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{int(parts[2])}.{LAYER_MAP['.'.join(parts[3:])]}"


# ---------------------------------------------------------------------------
# transformers side


def make_config(spec: Spec, sliding_window: int | None = None, rope_scaling: dict | None = None):
    rope = {"rope_type": "default", "rope_theta": spec.rope_theta}
    if rope_scaling is not None:
        rope = {**rope_scaling, "rope_theta": spec.rope_theta}
    kw = dict(
        vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF, num_hidden_layers=N_LAYER,
        num_attention_heads=spec.n_head, num_key_value_heads=spec.n_head_kv,
        max_position_embeddings=spec.max_pos, rms_norm_eps=RMS_EPS, rope_parameters=rope,
        tie_word_embeddings=spec.tied, bos_token_id=1, eos_token_id=2,
        attn_implementation="eager",
    )
    if spec.head_dim is not None:
        kw["head_dim"] = spec.head_dim
    if spec.arch == "mistral":
        return MistralConfig(sliding_window=sliding_window, **kw)
    check(sliding_window is None, "sliding window only for mistral")
    return LlamaConfig(**kw)


def build_model(spec: Spec, weights: dict[str, np.ndarray], *, sliding_window="spec", rope_scaling="spec"):
    sw = spec.sliding_window if sliding_window == "spec" else sliding_window
    rs = spec.rope_scaling if rope_scaling == "spec" else rope_scaling
    config = make_config(spec, sliding_window=sw, rope_scaling=rs)
    cls = MistralForCausalLM if spec.arch == "mistral" else LlamaForCausalLM
    model = cls(config).float().eval()
    check(model.config._attn_implementation == "eager", "eager attention not selected")
    params = dict(model.named_parameters())  # tied lm_head is deduplicated away here
    check(set(params) == set(weights), f"{spec.name}: parameter names {sorted(set(params) ^ set(weights))}")
    with torch.no_grad():
        for n, p in params.items():
            check(tuple(p.shape) == weights[n].shape, f"{n}: shape {tuple(p.shape)} vs {weights[n].shape}")
            p.copy_(torch.from_numpy(weights[n]))
    if spec.tied:
        check(model.lm_head.weight is model.model.embed_tokens.weight, "lm_head not tied")
    return model


def hf_logits(model, tokens: list[int]) -> np.ndarray:
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens], dtype=torch.long)).logits
    return out[0].float().numpy().astype(np.float32)


def random_weights(spec: Spec) -> dict[str, np.ndarray]:
    """Random float32 weights keyed by HF parameter name. Each tensor has its own
    generator seeded from (spec.seed, crc32(name)), independent of iteration order.
    Scales keep activations O(1) so attention is far from uniform; RMSNorm
    weights are uniform in [0.75, 1.25]."""
    cls = MistralForCausalLM if spec.arch == "mistral" else LlamaForCausalLM
    skeleton = cls(make_config(spec, sliding_window=spec.sliding_window, rope_scaling=spec.rope_scaling))
    out = {}
    for n, p in skeleton.named_parameters():  # tied lm_head is not listed
        shape = tuple(p.shape)
        rng = np.random.default_rng([spec.seed, zlib.crc32(n.encode())])
        if n.endswith("norm.weight"):
            w = rng.uniform(0.75, 1.25, size=shape)
        elif n == "model.embed_tokens.weight":  # tied: it is also the output matrix
            w = rng.normal(0.0, 1.0 / math.sqrt(N_EMBD) if spec.tied else 0.5, size=shape)
        else:
            w = rng.normal(0.0, 1.0 / math.sqrt(shape[1]), size=shape)
        out[n] = w.astype(np.float32)
    return out


# ---------------------------------------------------------------------------
# GGUF writing


def head_dim_of(spec: Spec) -> int:
    return spec.head_dim if spec.head_dim is not None else N_EMBD // spec.n_head


def gguf_tensors(spec: Spec, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float32 tensors in llama.cpp naming/layout (q/k permuted), insertion order = file order."""
    t = {}
    if spec.rope_scaling is not None:
        t["rope_freqs.weight"] = llama3_rope_factors(spec.rope_scaling, spec.rope_theta, head_dim_of(spec))
    t["token_embd.weight"] = weights["model.embed_tokens.weight"]
    for il in range(N_LAYER):
        for hf_suffix in LAYER_MAP:
            hf = f"model.layers.{il}.{hf_suffix}"
            w = weights[hf]
            if hf_suffix == "self_attn.q_proj.weight":
                w = permute(w, spec.n_head, spec.n_head)
            elif hf_suffix == "self_attn.k_proj.weight":
                w = permute(w, spec.n_head, spec.n_head_kv)
            t[gguf_name(hf)] = w
    t["output_norm.weight"] = weights["model.norm.weight"]
    if not spec.tied:
        t["output.weight"] = weights["lm_head.weight"]
    return t


def encode(arr: np.ndarray, wtype: str) -> tuple[np.ndarray, QT | None]:
    """(data, raw_dtype) for GGUFWriter.add_tensor; 1-D tensors always F32."""
    if arr.ndim == 1 or wtype == "f32":
        return arr.astype(np.float32), None
    if wtype == "f16":
        return arr.astype(np.float16), None
    if wtype == "bf16":
        return gguf.quants.quantize(arr, QT.BF16), QT.BF16  # uint8 bytes, [rows, 2*cols]
    q = QUANT_OF[wtype]
    return gguf.quants.quantize(arr, q), q


def write_gguf(path: Path, spec: Spec, tensors: dict[str, np.ndarray]) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(spec.name)
    w.add_context_length(spec.max_pos)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_dimension_count(head_dim_of(spec))
    w.add_vocab_size(N_VOCAB)
    if spec.sliding_window is not None:
        w.add_sliding_window(spec.sliding_window)
    w.add_file_type(int(FILE_TYPE[spec.wtype]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens = ["<unk>", "<s>", "</s>"] + [f"<t{i}>" for i in range(3, N_VOCAB)]
    types = [int(gguf.TokenType.UNKNOWN), int(gguf.TokenType.CONTROL), int(gguf.TokenType.CONTROL)] + \
        [int(gguf.TokenType.NORMAL)] * (N_VOCAB - 3)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    for name, arr in tensors.items():
        data, raw = encode(arr, spec.wtype)
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_gguf(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Metadata and float64 tensors [out, in] read back from a GGUF file.
    F32/F16/BF16 are decoded here by hand; block-quantised types via gguf.quants."""
    r = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    meta["_types"] = {k: [int(t) for t in f.types] for k, f in r.fields.items()}
    tensors = {}
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        raw = np.asarray(t.data)
        if t.tensor_type == QT.F32:
            a = raw.view("<f4")
        elif t.tensor_type == QT.F16:
            a = raw.view("<f2").astype(np.float32)
        elif t.tensor_type == QT.BF16:
            a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = gguf.quants.dequantize(raw, t.tensor_type)
        tensors[t.name] = a.reshape(shape).astype(np.float64)
        meta.setdefault("_ttype", {})[t.name] = t.tensor_type
    return meta, tensors


# ---------------------------------------------------------------------------
# independent numpy reference over GGUF tensors


def q8_0_round_trip(x) -> np.ndarray:
    """x in float32, quantised to Q8_0 along its last axis and back (the gguf package's
    quantiser): what llama.cpp's CPU backend, and slake's, multiply quantised weights with."""
    x32 = np.asarray(x, dtype=np.float32)
    flat = x32.reshape(-1, x32.shape[-1])
    return gguf.quants.dequantize(gguf.quants.quantize(flat, QT.Q8_0), QT.Q8_0).reshape(x32.shape)


def np_forward(meta: dict, t: dict[str, np.ndarray], tokens: list[int], window: int | None,
               act_q8: bool = False) -> np.ndarray:
    n_head = int(meta["llama.attention.head_count"])
    n_kv = int(meta["llama.attention.head_count_kv"])
    n_layer = int(meta["llama.block_count"])
    hd = int(meta["llama.rope.dimension_count"])
    theta = float(meta["llama.rope.freq_base"])
    eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
    T = len(tokens)

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    if "rope_freqs.weight" in t:
        inv = inv / t["rope_freqs.weight"]
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # [T, hd/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # [T, H, hd], adjacent pairs (2i, 2i+1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * cos - x1 * sin
        y[..., 1::2] = x0 * sin + x1 * cos
        return y

    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    visible = j <= i
    if window is not None:
        visible &= j > i - window

    def act(a):  # the input of a product with a weight matrix
        return q8_0_round_trip(a).astype(np.float64) if act_q8 else a

    x = t["token_embd.weight"][tokens]
    for il in range(n_layer):
        p = f"blk.{il}."
        h = act(rms(x, t[p + "attn_norm.weight"]))
        q = rope((h @ t[p + "attn_q.weight"].T).reshape(T, n_head, hd))
        k = rope((h @ t[p + "attn_k.weight"].T).reshape(T, n_kv, hd))
        v = (h @ t[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        out = np.empty((T, n_head, hd))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            s = q[:, hh] @ k[:, kv].T / math.sqrt(hd)
            s = np.where(visible, s, -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            out[:, hh] = s @ v[:, kv]
        x = x + act(out.reshape(T, n_head * hd)) @ t[p + "attn_output.weight"].T
        h = act(rms(x, t[p + "ffn_norm.weight"]))
        g = h @ t[p + "ffn_gate.weight"].T
        x = x + act((g / (1 + np.exp(-g))) * (h @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
    x = act(rms(x, t["output_norm.weight"]))
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


# ---------------------------------------------------------------------------


def round_weights(spec: Spec, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float32 values the stored model really holds."""
    if spec.wtype == "f32":
        return weights
    if spec.wtype == "f16":
        return {n: w.astype(np.float16).astype(np.float32) for n, w in weights.items()}
    if spec.wtype == "bf16":
        return {n: torch.from_numpy(w).to(torch.bfloat16).float().numpy() for n, w in weights.items()}
    q = QUANT_OF[spec.wtype]
    out = {}
    for n, w in weights.items():
        if w.ndim == 1:
            out[n] = w
            continue
        if n.endswith("q_proj.weight"):
            perm = lambda a: permute(a, spec.n_head, spec.n_head)  # noqa: E731
            inv = lambda a: unpermute(a, spec.n_head, spec.n_head)  # noqa: E731
        elif n.endswith("k_proj.weight"):
            perm = lambda a: permute(a, spec.n_head, spec.n_head_kv)  # noqa: E731
            inv = lambda a: unpermute(a, spec.n_head, spec.n_head_kv)  # noqa: E731
        else:
            perm = inv = lambda a: a  # noqa: E731
        deq = gguf.quants.dequantize(gguf.quants.quantize(perm(w), q), q)
        out[n] = np.ascontiguousarray(inv(deq)).astype(np.float32)
    return out


def make_model(spec: Spec, root: Path) -> None:
    d = root / "models" / spec.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    torch.manual_seed(spec.seed)

    weights = round_weights(spec, random_weights(spec))
    for n, w in weights.items():
        if w.ndim == 1 and n.endswith("norm.weight"):
            check(np.ptp(w) > 0.1, f"{n}: norm weights not perturbed")
    if spec.wtype == "bf16":  # the GGUF encoder must reproduce torch's rounding exactly
        for n, w in weights.items():
            if w.ndim == 2:
                check(np.array_equal(gguf.quants.dequantize(gguf.quants.quantize(w, QT.BF16), QT.BF16), w),
                      f"{n}: bf16 rounding mismatch")

    tokens = np.random.default_rng([spec.seed, 12345]).integers(3, N_VOCAB, size=N_TOKENS).tolist()
    model = build_model(spec, weights)
    logits = hf_logits(model, tokens)
    check(logits.shape == (N_TOKENS, N_VOCAB) and np.isfinite(logits).all(), "bad logits")
    if spec.wtype in QUANT_OF:
        # Quantised weights meet activations quantised to Q8_0, as in llama.cpp: every linear
        # layer's input goes through the gguf package's Q8_0 round trip.
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.register_forward_pre_hook(lambda _m, args: (torch.from_numpy(q8_0_round_trip(args[0].numpy())),))
        plain, logits = logits, hf_logits(model, tokens)
        e = rel_err(logits, plain)
        check(1e-3 < e < 0.1, f"{spec.name}: Q8_0 activations moved the logits by {e:.3g} of max |logit|")

    if spec.rope_scaling is not None:
        f = llama3_rope_factors(spec.rope_scaling, spec.rope_theta, head_dim_of(spec))
        check(not np.all(f == 1.0) and not np.all(f == spec.rope_scaling["factor"]),
              f"rope factors degenerate: {f}")
        base = spec.rope_theta ** (-np.arange(0, head_dim_of(spec), 2, dtype=np.float64) / head_dim_of(spec))
        hf_inv = model.model.rotary_emb.inv_freq.double().numpy()
        check(np.allclose(hf_inv, base / f, rtol=1e-5, atol=0),
              f"transformers inv_freq {hf_inv} != theta^-2i/d / rope_freqs {base / f}")
        plain = hf_logits(build_model(spec, weights, rope_scaling=None), tokens)
        check(rel_err(plain, logits) > 1e-2, "rope scaling does not change the logits")

    if spec.sliding_window is not None:
        W = spec.sliding_window
        full = hf_logits(build_model(spec, weights, sliding_window=None), tokens)
        check(np.allclose(full[:W], logits[:W], rtol=0, atol=1e-5),
              "sliding window changed logits at positions < window")
        check(np.max(np.abs(full[W:] - logits[W:])) > 1e-2,
              "transformers did not apply the sliding window (logits equal to full attention)")

    # fixtures
    ref = {"description": spec.description, "n_vocab": N_VOCAB, "tokens": tokens}
    (d / "reference.json").write_text(json.dumps(ref, sort_keys=True) + "\n")
    logits.astype("<f4").tofile(d / "logits.f32")
    write_gguf(d / "model.gguf", spec, gguf_tensors(spec, weights))

    if spec.write_hf:
        hf_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[spec.wtype]
        kw = {"max_shard_size": "100KB"} if spec.sharded else {}
        model.to(hf_dtype).save_pretrained(d / "hf", **kw)
        shards = sorted((d / "hf").glob("*.safetensors"))
        if spec.sharded:
            check(len(shards) >= 2 and (d / "hf" / "model.safetensors.index.json").exists(),
                  "hf/ not sharded")
        # round trip: reload in float32 and reproduce the reference
        cls = MistralForCausalLM if spec.arch == "mistral" else LlamaForCausalLM
        re = cls.from_pretrained(d / "hf", dtype=torch.float32, attn_implementation="eager").eval()
        check(rel_err(hf_logits(re, tokens), logits) < 1e-6, f"{spec.name}: hf/ reload mismatch")
    print(f"  {spec.name}: written")


def verify_gguf_model(spec: Spec, root: Path) -> None:
    d = root / "models" / spec.name
    meta, t = read_gguf(d / "model.gguf")
    tokens = json.loads((d / "reference.json").read_text())["tokens"]
    ref = np.fromfile(d / "logits.f32", dtype="<f4").reshape(N_TOKENS, N_VOCAB)

    # metadata as llama.cpp expects it
    hd = head_dim_of(spec)
    want = {
        "general.architecture": "llama", "general.name": spec.name,
        "llama.context_length": spec.max_pos, "llama.embedding_length": N_EMBD,
        "llama.block_count": N_LAYER, "llama.feed_forward_length": N_FF,
        "llama.attention.head_count": spec.n_head, "llama.attention.head_count_kv": spec.n_head_kv,
        "llama.rope.freq_base": spec.rope_theta, "llama.attention.layer_norm_rms_epsilon": RMS_EPS,
        "llama.rope.dimension_count": hd, "llama.vocab_size": N_VOCAB,
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
    }
    if spec.sliding_window is not None:
        want["llama.attention.sliding_window"] = spec.sliding_window
    for k, v in want.items():
        got = meta.get(k)
        ok = math.isclose(got, v, rel_tol=1e-6) if isinstance(v, float) else got == v
        check(ok, f"{spec.name}: {k} = {got!r}, want {v!r}")
    if spec.sliding_window is not None:
        check(meta["_types"]["llama.attention.sliding_window"] == [int(gguf.GGUFValueType.UINT32)],
              "sliding_window not uint32")
    check(meta["_types"]["tokenizer.ggml.token_type"][-1] == int(gguf.GGUFValueType.INT32), "token_type not int32")
    check(meta["_types"]["tokenizer.ggml.scores"][-1] == int(gguf.GGUFValueType.FLOAT32), "scores not float32")
    toks = meta["tokenizer.ggml.tokens"]
    check(toks[:4] == ["<unk>", "<s>", "</s>", "<t3>"] and len(toks) == N_VOCAB, "vocab")
    check(meta["tokenizer.ggml.token_type"][:4] == [2, 3, 3, 1], "token types")
    check(("output.weight" in t) != spec.tied, "output.weight presence")
    check(("rope_freqs.weight" in t) == (spec.rope_scaling is not None), "rope_freqs presence")
    want_2d = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0}[spec.wtype]
    for name, tt in meta["_ttype"].items():
        check(tt == (want_2d if t[name].ndim == 2 else QT.F32), f"{name}: type {tt.name}")

    got = np_forward(meta, t, tokens, spec.sliding_window, act_q8=spec.wtype in QUANT_OF)
    err = rel_err(got, ref)
    check(err < RTOL, f"{spec.name}: numpy GGUF forward vs transformers rel err {err:.3g}")
    msg = f"  {spec.name}: numpy(GGUF) vs transformers max rel err {err:.2e}"

    if "rope_freqs.weight" in t:  # the rope_freqs must matter
        t2 = {k: v for k, v in t.items() if k != "rope_freqs.weight"}
        check(rel_err(np_forward(meta, t2, tokens, spec.sliding_window), ref) > 100 * RTOL,
              "numpy forward without rope_freqs still matches")
    # the Q/K permutation must matter: rotate-half RoPE on the GGUF tensors must not match
    if spec.name == "llama2-mha":
        t3 = dict(t)
        for il in range(N_LAYER):
            t3[f"blk.{il}.attn_q.weight"] = unpermute(t[f"blk.{il}.attn_q.weight"], spec.n_head, spec.n_head)
            t3[f"blk.{il}.attn_k.weight"] = unpermute(t[f"blk.{il}.attn_k.weight"], spec.n_head, spec.n_head_kv)
        check(rel_err(np_forward(meta, t3, tokens, None), ref) > 100 * RTOL,
              "unpermuted Q/K still match: permutation check is vacuous")
    if spec.sliding_window is not None:
        W = spec.sliding_window
        for w_off in (W - 1, W + 1, None):
            e = rel_err(np_forward(meta, t, tokens, w_off), ref)
            check(e > 100 * RTOL, f"window {w_off} also matches transformers (err {e:.3g})")
        msg += f"; window {W}-1 / {W}+1 / none rejected"
    print(msg)


# ---------------------------------------------------------------------------
# quantisation fixtures

# type -> (block elements, block bytes, byte offsets of fp16 scale fields)
QUANT_BLOCKS = {
    QT.Q4_0: (32, 18, (0,)),
    QT.Q8_0: (32, 34, (0,)),
    QT.Q4_K: (256, 144, (0, 2)),   # d, dmin
    QT.Q6_K: (256, 210, (208,)),   # d is the last field
    QT.Q4_1: (32, 20, (0, 2)),     # d, m
    QT.Q5_0: (32, 22, (0,)),
    QT.Q5_1: (32, 24, (0, 2)),     # d, m
    QT.Q2_K: (256, 84, (80, 82)),  # scales, qs, then d, dmin
    QT.Q3_K: (256, 110, (108,)),   # hmask, qs, scales, then d
    QT.Q5_K: (256, 176, (0, 2)),   # d, dmin
    QT.IQ4_NL: (32, 18, (0,)),
    QT.IQ4_XS: (256, 136, (0,)),
}
Q_ROWS, Q_COLS = 4, 512


def make_quant(root: Path) -> None:
    d = root / "quant"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    raws = {}
    w = gguf.GGUFWriter(str(d / "quant.gguf"), "quant-fixture")
    w.add_name("slake quantisation fixtures")
    for qt, (bs, ts, scale_offs) in QUANT_BLOCKS.items():
        check(gguf.GGML_QUANT_SIZES[qt] == (bs, ts), f"{qt.name} block layout")
        rng = np.random.default_rng([99, int(qt)])
        n_blocks = Q_ROWS * Q_COLS // bs
        blocks = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
        for off in scale_offs:
            scale = rng.uniform(-0.05, 0.05, size=n_blocks).astype("<f2")
            blocks[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
        raw = blocks.reshape(Q_ROWS, Q_COLS // bs * ts)
        deq = gguf.quants.dequantize(raw, qt)
        check(deq.shape == (Q_ROWS, Q_COLS) and np.isfinite(deq).all(), f"{qt.name}: dequantised not finite")
        check(np.abs(deq).max() > 0, f"{qt.name}: all zero")
        deq.astype("<f4").tofile(d / f"{qt.name}.f32")
        w.add_tensor(qt.name, raw, raw_dtype=qt)
        raws[qt] = raw
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(str(d / "quant.gguf"))
    check(len(r.tensors) == len(raws), "quant.gguf tensor count")
    for t in r.tensors:
        qt = QT[t.name]
        check(t.tensor_type == qt, f"{t.name}: stored type {t.tensor_type}")
        check(t.shape.tolist() == [Q_COLS, Q_ROWS], f"{t.name}: ne {t.shape.tolist()}")
        check(np.array_equal(np.asarray(t.data), raws[qt]), f"{t.name}: bytes differ on re-read")
    print("  quant: written, re-read bytes identical")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="fixture root, e.g. tests/fixtures")
    ap.add_argument("--only-quant", action="store_true",
                    help="write only the quantisation fixtures (quant/), leaving the models as they are")
    args = ap.parse_args()
    if args.only_quant:
        print("writing quantisation fixtures")
        make_quant(args.out)
        return
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)  # bit-reproducible reductions
    torch.use_deterministic_algorithms(True)

    print("writing models")
    for spec in SPECS:
        make_model(spec, args.out)
    print("writing quantisation fixtures")
    make_quant(args.out)
    print("checking GGUF layout with an independent numpy forward pass")
    for spec in SPECS:
        verify_gguf_model(spec, args.out)

    total = sum(p.stat().st_size for sub in ("models", "quant")
                for p in (args.out / sub).rglob("*") if p.is_file())
    print(f"total fixture size: {total / 1e6:.2f} MB")
    check(total < 8e6, "fixtures exceed 8 MB")


if __name__ == "__main__":
    main()
