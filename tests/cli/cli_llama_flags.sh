#!/usr/bin/env bash
# llama.cpp's launch lines run unchanged: slake-cli with llama-cli's multi-letter flags (-fa, -ngl,
# -no-cnv, -sys, -sysf, -cnv, -st) and slake-server with llama-server's (-np, -ngl, -fa, --jinja,
# --metrics, --cont-batching). Flags that change nothing here leave the output as it is and are
# named once on stderr; -sysf reads the system prompt -sys gives; -st ends the chat after one
# reply; -r ends a reply at its reverse prompt; -l biases a token; a flag slake does not have is
# refused by name.
# Exits 77 when ../shared lacks stories260K.
set -u
bin=$1
gguf=$2/models/stories260K.gguf
if [ ! -e "$gguf" ]; then echo "skipped: shared material missing: $gguf"; exit 77; fi
tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=../check_lib.sh
. "$(dirname "$0")/../check_lib.sh"

cli() {  # cli NAME ARGS...: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err
  local name=$1; shift
  "$bin/slake-cli" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
}

cli plain -m "$gguf" -p "Once upon a time" -n 24 --temp 0 --no-display-prompt
cli llama -m "$gguf" -p "Once upon a time" -n 24 --temp 0 --no-display-prompt -fa on -ngl 99 -no-cnv --no-mmap
check "-fa on -ngl 99 -no-cnv --no-mmap leave the text as it is" cmp -s "$tmp/plain.out" "$tmp/llama.out"
check "-fa on is named once on stderr" test "$(grep -c '^slake-cli: -fa on: ignored' "$tmp/llama.err")" -eq 1
check "-ngl 99 is named once on stderr" test "$(grep -c '^slake-cli: -ngl 99: ignored' "$tmp/llama.err")" -eq 1
# llama-bench's and llama-perplexity's lines carry them too.
"$bin/slake-bench" -m "$gguf" -p 16 -n 4 -r 1 -fa 1 -ngl 99 -o csv >"$tmp/bench.out" 2>"$tmp/bench.err"
check "slake-bench runs with -fa 1 -ngl 99" test "$(grep -c '^' "$tmp/bench.out")" -ge 3
check "and names each once" test "$(grep -c -e '^slake-bench: -fa 1: ignored' -e '^slake-bench: -ngl 99: ignored' "$tmp/bench.err")" -eq 2
"$bin/slake-perplexity" -m "$gguf" -f "$2/text/wikitext2-test.txt" -c 64 --chunks 2 -t 1 >"$tmp/ppl.out" 2>"$tmp/ppl.err"
"$bin/slake-perplexity" -m "$gguf" -f "$2/text/wikitext2-test.txt" -c 64 --chunks 2 -t 1 -fa on -ngl 99 >"$tmp/ppl_llama.out" 2>"$tmp/ppl_llama.err"
ppl=$(grep '^Final estimate: PPL = ' "$tmp/ppl.out")
check "slake-perplexity with -fa on -ngl 99 gives the same perplexity" test -n "$ppl" -a "$ppl" = "$(grep '^Final estimate' "$tmp/ppl_llama.out")"
check "and names -fa on" grep -q '^slake-perplexity: -fa on: ignored' "$tmp/ppl_llama.err"

# -l / --logit-bias TOKEN(+|-)BIAS: -inf bans the greedy reply's first token (a SentencePiece ","),
# +0 changes nothing; a malformed bias or a token outside the vocabulary is refused by name.
comma=$("$bin/slake-tokenize" -m "$gguf" -p "," 2>/dev/null | tail -1 | tr -d '[] ' | awk -F, '{print $NF}')
cli bias -m "$gguf" -p "Once upon a time" -n 24 --temp 0 --no-display-prompt -l "${comma}-inf"
cli bias0 -m "$gguf" -p "Once upon a time" -n 24 --temp 0 --no-display-prompt --logit-bias "${comma}+0"
check "the greedy reply starts with ','" grep -q '^,' "$tmp/plain.out"
check "-l TOKEN-inf bans that token" sh -c "! grep -q '^,' '$tmp/bias.out' && test -s '$tmp/bias.out'"
check "--logit-bias TOKEN+0 changes nothing" cmp -s "$tmp/plain.out" "$tmp/bias0.out"
cli biasbad -m "$gguf" -p x -n 2 -l "${comma}x1"
check "a malformed --logit-bias is refused by name" grep -q -- "--logit-bias: expected" "$tmp/biasbad.err"
cli biasbig -m "$gguf" -p x -n 2 -l 99999+1
check "a token outside the vocabulary is refused" grep -q "outside the vocabulary" "$tmp/biasbig.err"

# The sampler flags reach the sampler (tests/test_sampler.cpp checks each one's arithmetic): each
# changes the reply of the same seed, its "off" value leaves it as it is, and a value out of range
# is refused by name. The penalties act on the greedy reply, the samplers on a drawn one.
for f in "--presence-penalty 1.5" "--frequency-penalty 1.5" "--dry-multiplier 2 --dry-allowed-length 1" \
         "--typical 0.2" "--xtc-probability 1 --xtc-threshold 0.05" "--mirostat 2 --mirostat-ent 1"; do
  case $f in --typical*|--xtc*|--mirostat*) draw="--temp 0.8 --seed 5" ;; *) draw="--temp 0" ;; esac
  # shellcheck disable=SC2086
  "$bin/slake-cli" -m "$gguf" -p "Once upon a time" -n 64 --no-display-prompt $draw >"$tmp/s0.out" 2>/dev/null
  # shellcheck disable=SC2086
  "$bin/slake-cli" -m "$gguf" -p "Once upon a time" -n 64 --no-display-prompt $draw $f >"$tmp/s1.out" 2>/dev/null
  check "$f changes the reply" sh -c "test -s '$tmp/s1.out' && ! cmp -s '$tmp/s0.out' '$tmp/s1.out'"
done
for f in "--presence-penalty 0" "--frequency-penalty 0" "--dry-multiplier 0" "--typical 1" "--xtc-probability 0" "--mirostat 0"; do
  # shellcheck disable=SC2086
  "$bin/slake-cli" -m "$gguf" -p "Once upon a time" -n 64 --no-display-prompt --temp 0.8 --seed 5 $f >"$tmp/s1.out" 2>/dev/null
  "$bin/slake-cli" -m "$gguf" -p "Once upon a time" -n 64 --no-display-prompt --temp 0.8 --seed 5 >"$tmp/s0.out" 2>/dev/null
  check "$f changes nothing" sh -c "test -s '$tmp/s0.out' && cmp -s '$tmp/s0.out' '$tmp/s1.out'"
done
for f in "--presence-penalty 3:presence penalty" "--typical 0:typical-p" "--mirostat 1:mirostat" "--xtc-probability 2:xtc"; do
  # shellcheck disable=SC2086
  "$bin/slake-cli" -m "$gguf" -p x -n 2 ${f%%:*} >/dev/null 2>"$tmp/bad.err"
  check "${f%%:*} is refused, naming ${f#*:}" sh -c "test \$(grep -c . '$tmp/bad.err') -eq 1 && grep -qi '${f#*:}' '$tmp/bad.err'"
done

printf 'You tell short stories.' >"$tmp/system.txt"
chat() {  # chat NAME ARGS...: a chat of two messages (-p and one line of standard input)
  local name=$1; shift
  printf 'Tell me more.\n' | "$bin/slake-cli" -m "$gguf" -c 512 --chat-template chatml -p "Hi" -n 8 --temp 0 "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
}
chat sys -sys "You tell short stories." -cnv
chat sysf -sysf "$tmp/system.txt" -cnv
chat single -sysf "$tmp/system.txt" -cnv -st
check "-sysf FILE is -sys with the file's text" cmp -s "$tmp/sys.out" "$tmp/sysf.out"
# A reply may hold newlines itself: -st's output is the two-message chat's first reply, a proper prefix.
check "-st answers the first message only" test "$(wc -c <"$tmp/single.out")" -lt "$(wc -c <"$tmp/sysf.out")"
check "-st's reply is the chat's first" test "$(head -c "$(wc -c <"$tmp/single.out")" "$tmp/sysf.out")" = "$(cat "$tmp/single.out")"

printf 'hello there\n' | "$bin/slake-cli" -m "$gguf" -c 48 -cnv --chat-template chatml -p hi -n -1 --temp 0 >/dev/null 2>"$tmp/full.err"
check "a chat that fills the full cache says so" grep -q "the context is full (-c 48)" "$tmp/full.err"
check "and names an evicting policy that holds a long chat" grep -q -- "--kv-policy slake --kv-budget" "$tmp/full.err"

"$bin/slake-cli" -m "$gguf" -c 512 -p "" -n 100 --temp 0 -r " little" -r "never there" >"$tmp/r.out" 2>"$tmp/r.err"
check "-r (a reverse prompt, llama-cli's spelling) ends the reply with it" grep -q " little$" "$tmp/r.out"
"$bin/slake-cli" -m "$gguf" -p x --lora adapter.gguf >/dev/null 2>"$tmp/lora.err"
check "--lora (an adapter, which slake does not apply) is refused by name" grep -q -- "--lora" "$tmp/lora.err"

# llama-server's launch line, as its README gives it, with a free port.
"$bin/slake-server" -m "$gguf" -c 512 -np 2 -ngl 99 -fa on --jinja --metrics --cont-batching --port 0 -t 1 2>"$tmp/server.err" &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/server.err")
  [ -n "$port" ] && break
  sleep 0.1
done
check "slake-server starts with llama-server's flags" test -n "$port"
if [ -n "$port" ]; then
  text=$(python3 - "$port" <<'PY'
import json, sys, urllib.request
body = json.dumps({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as r:
    print(json.load(r)["choices"][0]["text"], end="")
PY
)
  check "and answers as slake-cli does" test "$text" = "$(head -c -1 "$tmp/plain.out")"
  ctx=$(python3 -c "import json, sys, urllib.request; print(*[s['n_ctx'] for s in json.load(urllib.request.urlopen('http://127.0.0.1:$port/slots', timeout=10))])")
  check "-c is the total, split over the slots as llama-server splits it (2 x 256)" test "$ctx" = "256 256"
fi
kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; server_pid=
"$bin/slake-server" -m "$gguf" -c 512 -np 2 -kvu --port 0 -t 1 2>"$tmp/kvu.err" &
server_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$tmp/kvu.err" && break; sleep 0.1; done
check "-kvu: each slot may hold all of -c, the plans capped at its full cache" \
  grep -q "2 slots of 512 tokens (-c 512 unified.*KV memory [0-9]* MiB" "$tmp/kvu.err"
for f in "-ngl 99" "-fa on" "--jinja" "--metrics" "--cont-batching"; do
  check "slake-server names $f as ignored" grep -q -- "^slake-server: $f: ignored" "$tmp/server.err"
done
check_summary
