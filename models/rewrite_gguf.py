#!/usr/bin/env python3
"""Rewrite a GGUF file with its quantised tensors stored as F16 (or F32): every metadata key and
every tensor kept, in order; norms and other F32 tensors stay F32. The F16 rewrite of a quantised
model is what llama.cpp's llama-quantize starts from, and it lets the engine run the model's own
weights without activation quantisation (float weights meet fp32 activations).

    python models/rewrite_gguf.py IN.gguf OUT.gguf [--type f16|f32]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", choices=["f16", "f32"], default="f16")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    want = np.float16 if a.type == "f16" else np.float32
    for t in r.tensors:
        if t.tensor_type in (QT.F32, QT.F16):
            data = np.asarray(t.data)
            w.add_tensor(t.name, data, raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
            continue
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        shape = list(reversed(t.shape.tolist()))
        w.add_tensor(t.name, deq.reshape(shape).astype(want))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
