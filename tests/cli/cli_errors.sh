#!/usr/bin/env bash
# Bad input to the command-line tools: a non-zero exit and one line on stderr starting "error:"
# (or CLI11's own message for bad flags), never a crash.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
total=0

expect_error() {  # expect_error PATTERN CMD...
  local pattern=$1; shift
  total=$((total + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ] || ! grep -q -- "$pattern" "$tmp/err"; then
    echo "FAIL: $* -> exit $rc, stderr:"; cat "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok: $* -> exit $rc: $(head -c 200 "$tmp/err" | head -n 1)"
  fi
}

model_ok=$(dirname "$0")/../fixtures/models/llama2-mha/model.gguf
printf 'GGUF\x03\x00\x00\x00' >"$tmp/truncated.gguf"
head -c 100 /dev/urandom >"$tmp/random.gguf"
mkdir -p "$tmp/hf" && echo '{"model_type": "llama",' >"$tmp/hf/config.json"

expect_error "error: /nonexistent.gguf: no such file" "$bin/slake-cli" -m /nonexistent.gguf
expect_error "error: .*truncated.gguf: truncated file" "$bin/slake-cli" -m "$tmp/truncated.gguf"
expect_error "error: .*random.gguf: not a GGUF file" "$bin/slake-cli" -m "$tmp/random.gguf"
expect_error "error: .*config.json: malformed JSON" "$bin/slake-cli" -m "$tmp/hf"
expect_error "-n" "$bin/slake-cli" -m x -n -5
expect_error "required" "$bin/slake-cli"
expect_error "--tokenizer" "$bin/slake-convert-llama2c" "$tmp/truncated.gguf"
expect_error "error: .*implausible header" "$bin/slake-convert-llama2c" "$tmp/random.gguf" --tokenizer "$tmp/random.gguf" --gguf "$tmp/o.gguf"

expect_error "unknown KV policy 'bogus'" "$bin/slake-cli" -m "$model_ok" --kv-policy bogus --kv-budget 64
expect_error "must be larger than the window" "$bin/slake-cli" -m "$model_ok" --kv-budget 16
expect_error "kv-budget" "$bin/slake-cli" -m "$model_ok" --kv-budget -3
expect_error "kv-delta" "$bin/slake-perplexity" -m "$model_ok" -f /nonexistent.txt --kv-delta -0.5
# Cache types: an unknown one, or one the backend lacks, before any file is opened (-m names none);
# one the model's head dimension cannot hold (llama2-mha: 16) once its header is read.
expect_error "cache-type-k: q5_1 not in {f32,f16,bf16,q8_0,q4_0,kivi2,kivi4}" "$bin/slake-cli" -m /nonexistent.gguf -ctk q5_1
expect_error "cache-type-v: kivi not in" "$bin/slake-perplexity" -m /nonexistent.gguf -f /nonexistent.txt -ctv kivi
expect_error "error: the cuda backend stores its KV cache as f32, f16, bf16 or q8_0; cache type q4_0 is cpu only" "$bin/slake-cli" -m /nonexistent.gguf --backend cuda -ctv q4_0
expect_error "error: --cache-type-k q8_0 stores blocks of 32 values; this model's head dimension is 16" "$bin/slake-cli" -m "$model_ok" -ctk q8_0
expect_error "kv-evict-every" "$bin/slake-cli" -m "$model_ok" --kv-evict-every 0
expect_error "error: --prefill-chunk 8 must be at least the window (32 tokens)" "$bin/slake-cli" -m /nonexistent.gguf \
  --kv-policy snapkv --kv-budget 64 --prefill-chunk 8
expect_error "error: --prefill-chunk: h2o accumulates" "$bin/slake-cli" -m /nonexistent.gguf --kv-policy h2o --kv-budget 64 --prefill-chunk 64

expect_error "error: -n must be -1" "$bin/slake-cli" -m "$model_ok" -n -2
expect_error "error: --seed must be -1" "$bin/slake-cli" -m "$model_ok" -s -7
expect_error "error: sampling: top-p must be in (0, 1\]" "$bin/slake-cli" -m "$model_ok" --top-p 0
expect_error "error: sampling: top-p must be in (0, 1\]" "$bin/slake-cli" -m "$model_ok" --top-p 1.5
expect_error "error: sampling: top-k must be >= 0" "$bin/slake-cli" -m "$model_ok" --top-k -1
expect_error "error: sampling: min-p must be in \[0, 1\]" "$bin/slake-cli" -m "$model_ok" --min-p 2
expect_error "error: sampling: repeat penalty must be a positive number" "$bin/slake-cli" -m "$model_ok" --repeat-penalty 0
expect_error "error: sampling: repeat-last-n must be >= -1" "$bin/slake-cli" -m "$model_ok" --repeat-last-n -2
expect_error "error: unknown chat template 'bogus' (known: llama2, llama3, mistral-v3, mistral-v1, mistral-v3-tekken, mistral-v7, chatml, zephyr, vicuna, deepseek, falcon3, alpaca, gemma)" "$bin/slake-cli" -m "$model_ok" --chat-template bogus
expect_error "error: the model has no chat template; choose one with --chat-template" "$bin/slake-cli" -m "$model_ok" -cnv </dev/null
expect_error "error: give --chat-template NAME or --chat-template-file FILE, not both" "$bin/slake-cli" -m "$model_ok" \
  --chat-template chatml --chat-template-file "$tmp/none.jinja"
expect_error "error: --jinja renders a Jinja template" "$bin/slake-cli" -m "$model_ok" --jinja --chat-template chatml
printf 'line one\n{%% for m in messages %%}\n{{ m.content | nosuchfilter }}\n{%% endfor %%}' >"$tmp/bad_filter.jinja"
expect_error "error: .*bad_filter.jinja line 3: no filter named 'nosuchfilter'" "$bin/slake-cli" -m "$model_ok" \
  --chat-template-file "$tmp/bad_filter.jinja" -p hi
printf '{%% if messages %%}\n{{ 1 +  }}' >"$tmp/bad_syntax.jinja"
expect_error "error: .*bad_syntax.jinja line 2: unexpected" "$bin/slake-cli" -m "$model_ok" \
  --chat-template-file "$tmp/bad_syntax.jinja" -p hi
expect_error "error: the prompt is not valid UTF-8 (byte 1 of 3)" "$bin/slake-cli" -m "$model_ok" -p "$(printf 'a\377b')"
printf 'caf\303' >"$tmp/cut.txt"
expect_error "error: the prompt is not valid UTF-8 (byte 3 of 4)" "$bin/slake-cli" -m "$model_ok" -f "$tmp/cut.txt"
expect_error "error: the prompt is [0-9]* tokens, more than the context holds (-c 8)" "$bin/slake-cli" -m "$model_ok" -c 8 -p "a prompt longer than eight tokens"
expect_error "error: give the prompt with -p TEXT or -f FILE, not both" "$bin/slake-cli" -m "$model_ok" -p a -f "$tmp/cut.txt"
expect_error "error: /nonexistent.txt: cannot open" "$bin/slake-cli" -m "$model_ok" -f /nonexistent.txt
expect_error "error: .*temp" "$bin/slake-cli" -m "$model_ok" --temp warm
expect_error "error: the conversation is [0-9]* tokens, more than the context holds (-c 8)" "$bin/slake-cli" -m "$model_ok" -c 8 -cnv --chat-template llama3 -p hi

expect_error "required" "$bin/slake-tokenize" -p hello
expect_error "error: /nonexistent.gguf: no such file" "$bin/slake-tokenize" -m /nonexistent.gguf -p hello
expect_error "error: give the text with exactly one of -p TEXT or -f FILE" "$bin/slake-tokenize" -m "$tmp/random.gguf"
expect_error "error: .*random.gguf: not a GGUF file" "$bin/slake-tokenize" -m "$tmp/random.gguf" -p hello
expect_error "error: .*hf: not a tokenizer directory (no tokenizer.json)" "$bin/slake-tokenize" -m "$tmp/hf" -p hello
expect_error "error: /nonexistent.txt: cannot open" "$bin/slake-tokenize" -m "$tmp/random.gguf" -f /nonexistent.txt

printf 'a short text\n' >"$tmp/short.txt"
expect_error "error: /nonexistent.txt: cannot open" "$bin/slake-perplexity" -m "$model_ok" -f /nonexistent.txt
expect_error "error: .*short.txt: [0-9]* tokens, fewer than one chunk of 512" "$bin/slake-perplexity" -m "$model_ok" -f "$tmp/short.txt"
expect_error "error: --prefill must be between 1 and the chunk size - 1 (63), got 64" "$bin/slake-perplexity" -m "$model_ok" -f "$tmp/short.txt" -c 64 --prefill 64
expect_error "error: unknown KV policy 'bogus' (full, streaming, h2o, ahakv, snapkv, pyramidkv, cake, slake, slake-wide)" "$bin/slake-perplexity" -m "$model_ok" -f "$tmp/short.txt" --kv-policy bogus
expect_error "error: KV budget 16 must be larger than the window 32" "$bin/slake-perplexity" -m "$model_ok" -f "$tmp/short.txt" --kv-budget 16
expect_error "kv-window" "$bin/slake-perplexity" -m "$model_ok" -f "$tmp/short.txt" --kv-window 0
expect_error "ctx-size" "$bin/slake-perplexity" -m "$model_ok" -f "$tmp/short.txt" -c 1

expect_error "error: give a model with -m FILE or --synthetic NAME" "$bin/slake-bench"
expect_error "error: unknown synthetic model 'gpt-5' (llama-3.1-8b, llama-2-7b, mistral-7b-v0.3, tinyllama-1.1b, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, qwen3-0.6b, qwen3-8b, qwen3-30b-a3b, mixtral-8x7b, gemma-3-270m, gemma-3-1b, gemma-3-4b, gemma-2-2b, phi-3-mini, tiny)" "$bin/slake-bench" --synthetic gpt-5 --mem-bandwidth 1
# --backend cuda: refused by a build without CUDA, or by a CUDA build on a machine without a device.
if ! "$bin/slake-bench" --synthetic tiny -p 16 -n 0 -r 1 --backend cuda >/dev/null 2>&1; then
  expect_error "error: .*cuda" "$bin/slake-bench" --synthetic tiny -p 16 -n 0 -r 1 --backend cpu,cuda
fi
expect_error "error: the cuda backend stores its KV cache as f32, f16, bf16 or q8_0; cache type q4_0 is cpu only" "$bin/slake-bench" -m /nonexistent.gguf --backend cuda -ctk f16,q4_0 --mem-bandwidth 1
expect_error "error: -t: thread counts must be positive" "$bin/slake-bench" --synthetic tiny -t 2,0
expect_error "error: -p: sizes must not be negative" "$bin/slake-bench" --synthetic tiny -p -5
expect_error "error: KV budget 16 must be larger than the window 32" "$bin/slake-bench" --synthetic tiny --kv-policy slake --kv-budget 16
expect_error "output" "$bin/slake-bench" --synthetic tiny -o xml
expect_error "error: synthetic:tiny: depth 200000 + 128 tokens exceed the model's context of 131072" "$bin/slake-bench" --synthetic tiny -d 200000 -p 0 --mem-bandwidth 1
expect_error "error: /nonexistent.gguf: no such file" "$bin/slake-bench" -m /nonexistent.gguf --mem-bandwidth 1

echo "$(( total - fails )) passed, $fails failed"
[ "$fails" -eq 0 ]
