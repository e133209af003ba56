#!/usr/bin/env bash
# slake-cli end to end on the real stories260K model of ../shared: greedy output independent of the
# thread count and of the file format (GGUF, or the Hugging Face directory that
# slake-convert-llama2c writes), seeded sampling reproducible, stdout holding only text.
# Exits 77 (ctest's SKIP_RETURN_CODE) when ../shared lacks the model.
set -u
bin=$1
models=$2/models
for f in stories260K.gguf stories260K.bin tok512.bin; do
  if [ ! -e "$models/$f" ]; then echo "skipped: shared material missing: $models/$f"; exit 77; fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../check_lib.sh
. "$(dirname "$0")/../check_lib.sh"

cli() {  # cli NAME ARGS...: runs slake-cli, stdout to $tmp/NAME.out, stderr to $tmp/NAME.err
  local name=$1; shift
  "$bin/slake-cli" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || { echo "slake-cli $* failed:"; cat "$tmp/$name.err"; }
}

gguf=$models/stories260K.gguf
"$bin/slake-convert-llama2c" "$models/stories260K.bin" --tokenizer "$models/tok512.bin" --hf "$tmp/hf" >/dev/null

# -c 512: llama.cpp's GGUF conversion records a training context of 128, ours 512.
cli greedy_t1 -m "$gguf" -c 512 -p "" -n 200 --temp 0 -t 1
cli greedy_t2 -m "$gguf" -c 512 -p "" -n 200 --temp 0 -t 2
cli greedy_hf -m "$tmp/hf" -c 512 -p "" -n 200 --temp 0 -t 2
cli seed42_a -m "$gguf" -c 512 -p "" -n 200 --temp 0.8 -s 42
cli seed42_b -m "$gguf" -c 512 -p "" -n 200 --temp 0.8 -s 42 -t 1
cli seed43 -m "$gguf" -c 512 -p "" -n 200 --temp 0.8 -s 43
printf 'Hello!\nTell me a story.\n' >"$tmp/chat.in"
"$bin/slake-cli" -m "$gguf" -c 512 -cnv --chat-template llama2 -sys "Be kind." -n 30 --temp 0 <"$tmp/chat.in" \
  >"$tmp/chat.out" 2>"$tmp/chat.err"
chat_rc=$?
# The text each turn adds (llama2 template): the first with the system block, the second only the
# new message after the first reply; BOS from the vocabulary's rule on the first turn alone.
count_tokens() { "$bin/slake-tokenize" -m "$gguf" --parse-special "$@" | tr -cd ',[' | wc -c; }
turn1=$(count_tokens -p "$(printf '[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHello! [/INST]')")
turn2=$(count_tokens --no-bos -p "<s>[INST] Tell me a story. [/INST]")

check "greedy output starts with the known story" grep -q "^ Once upon a time, there was a little girl named Lily\." "$tmp/greedy_t1.out"
check "greedy output is a whole story (over 400 bytes)" test "$(wc -c <"$tmp/greedy_t1.out")" -gt 400
check "greedy output identical with -t 1 and -t 2" cmp -s "$tmp/greedy_t1.out" "$tmp/greedy_t2.out"
check "greedy output identical from the Hugging Face directory" cmp -s "$tmp/greedy_t1.out" "$tmp/greedy_hf.out"
check "seeded sampling identical across runs" cmp -s "$tmp/seed42_a.out" "$tmp/seed42_b.out"
check "another seed gives other text" bash -c "! cmp -s '$tmp/seed42_a.out' '$tmp/seed43.out'"
check "sampling differs from greedy" bash -c "! cmp -s '$tmp/seed42_a.out' '$tmp/greedy_t1.out'"
check "stdout holds no load information or statistics" \
  bash -c "! grep -h -E '^(loaded|seed:|prompt:|generation:|KV cache|chat template:)' '$tmp'/*.out"
check "stderr reports prompt and generation speed and the KV cache" \
  bash -c "grep -q -E '^prompt: 1 tokens .*tokens/s' '$tmp/greedy_t1.err' && grep -q '^generation: 200 tokens' '$tmp/greedy_t1.err' \
  && grep -q '^KV cache: .* MiB' '$tmp/greedy_t1.err'"
check "a two-turn chat answers and ends at end of input" bash -c "[ $chat_rc -eq 0 ] && [ -s '$tmp/chat.out' ]"
check "the chat keeps its context: it reads $turn1 + $turn2 prompt tokens, not the conversation again" \
  grep -q "^prompt: $((turn1 + turn2)) tokens" "$tmp/chat.err"

# -r: the reply stops once its text ends with the string (written, as llama-cli does).
cli reverse -m "$gguf" -c 512 -p "" -n 200 --temp 0 -r "Lily" -r "never appears"
check "-r stops the reply at the first reverse prompt, which ends the text" \
  test "$(cat "$tmp/reverse.out")" = " Once upon a time, there was a little girl named Lily"
# The chat's commands, greedy: /regen answers the same message with the same reply (the context
# emptied and the conversation prefilled anew); /clear starts again, so the same message gets the
# first reply again; /exit ends the chat (the message after it is not read); a line ending in a
# backslash continues on the next line (one message, one reply).
chat() { "$bin/slake-cli" -m "$gguf" -c 512 -cnv --chat-template llama2 -n 24 --temp 0 >"$tmp/$1.out" 2>"$tmp/$1.err"; }
printf 'Hello!\n/regen\nTell me a story.\n/clear\nHello!\n/exit\nTell me more.\n' | chat commands
printf '/regen\nHello\\\nthere!\n' | chat continued
mapfile -t replies <"$tmp/commands.out"
check "/regen and /clear: replies 1, 2 and 4 equal, reply 3 another, nothing after /exit" \
  bash -c "[ ${#replies[@]} -eq 4 ] && [ '${replies[0]}' = '${replies[1]}' ] && [ '${replies[0]}' = '${replies[3]}' ] \
    && [ '${replies[2]}' != '${replies[0]}' ] && [ -n '${replies[0]}' ]"
check "/regen before any answer says so; a backslash joins two lines into one message" \
  bash -c "grep -q 'slake-cli: /regen: no answered message to ask again' '$tmp/continued.err' && [ \$(wc -l <'$tmp/continued.out') -eq 1 ]"

check_summary
