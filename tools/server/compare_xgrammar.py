"""XGrammar's costs on the same task as bench_structured.py: its compile time for that 10-field
schema on a GGUF's byte-level vocabulary (SmolLM2's), and the time of each token mask while it
steps through the value slake-server replies with (re-spelled as json.dumps writes it; every token
must be allowed by XGrammar's mask too). XGrammar is not one of the project's dependencies: run
it from a venv of its own.

    python3 -m venv /tmp/xgv && /tmp/xgv/bin/pip install xgrammar gguf
    slake-server -m SmolLM2-135M-Instruct.Q4_1.gguf -c 2048 -np 1 -t 2 --port 8080 &
    /tmp/xgv/bin/python tools/server/compare_xgrammar.py http://127.0.0.1:8080 SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import os
import statistics
import sys
import time
import urllib.request

import gguf
import xgrammar as xgr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_structured import SCHEMA, MESSAGES
url, model = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(model)
f = r.fields["tokenizer.ggml.tokens"]
vocab = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
eos = int(r.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
t = time.perf_counter()
info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.BYTE_LEVEL, stop_token_ids=[eos])
t_info = time.perf_counter() - t
compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
t = time.perf_counter()
compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=True, strict_mode=True)
t_compile = time.perf_counter() - t
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
    {"messages": MESSAGES, "temperature": 0, "max_tokens": 400, "return_tokens": True,
     "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}).encode(),
    headers={"Content-Type": "application/json"})
out = json.load(urllib.request.urlopen(req, timeout=600))
# The reply's value in JSON's own spelling, tokenized by the server (XGrammar's any_whitespace
# grammar and slake's llama.cpp-style one differ on where a newline may go).
text = json.dumps(json.loads(out["choices"][0]["message"]["content"]), indent=1)
req = urllib.request.Request(url + "/tokenize", data=json.dumps({"content": text}).encode(),
                             headers={"Content-Type": "application/json"})
tokens = json.load(urllib.request.urlopen(req))["tokens"] + [eos]
bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
times = []
for rounds in range(3):
    m = xgr.GrammarMatcher(compiled)
    for tok in tokens:
        t = time.perf_counter()
        m.fill_next_token_bitmask(bitmask)
        times.append(time.perf_counter() - t)
        word = int(bitmask[0, tok // 32]) & 0xFFFFFFFF
        assert (word >> (tok % 32)) & 1, f"XGrammar's mask refuses token {tok} ({vocab[tok]!r}) of {text!r}"
        assert m.accept_token(tok)
print(json.dumps({"reply_tokens": len(tokens), "tokenizer_info_ms": round(t_info * 1e3, 1),
                  "compile_ms": round(t_compile * 1e3, 2), "mask_mean_ms": round(statistics.mean(times) * 1e3, 3),
                  "mask_median_ms": round(statistics.median(times) * 1e3, 3), "mask_max_ms": round(max(times) * 1e3, 3)}))
