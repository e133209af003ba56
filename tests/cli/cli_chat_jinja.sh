#!/usr/bin/env bash
# slake-cli -cnv through a real model's own Jinja chat template (SmolLM2's ChatML, from
# ../shared/chat-templates, given with --chat-template-file to stories260K, which has none): three
# turns, checking with --verbose-prompt the text and token ids each turn feeds (not the answers):
# the whole render on the first turn (the template's default system message, BOS from the
# vocabulary), then only the new user message and the generation prompt.
# Exits 77 (ctest's SKIP_RETURN_CODE) when ../shared lacks the model or the template.
set -u
bin=$1
shared=$2
gguf=$shared/models/stories260K.gguf
tmpl=$shared/chat-templates/HuggingFaceTB-SmolLM2-135M-Instruct.jinja
for f in "$gguf" "$tmpl"; do
  if [ ! -e "$f" ]; then echo "skipped: shared material missing: $f"; exit 77; fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../check_lib.sh
. "$(dirname "$0")/../check_lib.sh"

printf 'Hi there\nTell me a story\nThanks\n' >"$tmp/chat.in"
"$bin/slake-cli" -m "$gguf" -c 512 -cnv --chat-template-file "$tmpl" --verbose-prompt -n 8 --temp 0 \
  <"$tmp/chat.in" >"$tmp/chat.out" 2>"$tmp/chat.err"
rc=$?

# What the ChatML template renders, turn by turn (jinja2 renders the same; see test_jinja.cpp).
printf '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n' >"$tmp/turn1.txt"
printf '<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n' >"$tmp/turn2.txt"
printf '<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n' >"$tmp/turn3.txt"
ids() { "$bin/slake-tokenize" -m "$gguf" --parse-special "$@" | tr -d '[],'; }
ids -f "$tmp/turn1.txt" >"$tmp/want1"
ids --no-bos -f "$tmp/turn2.txt" >"$tmp/want2"
ids --no-bos -f "$tmp/turn3.txt" >"$tmp/want3"
grep '^prompt tokens: ' "$tmp/chat.err" | sed 's/^prompt tokens: //' >"$tmp/got"

check "a three-turn chat runs to the end of input" bash -c "[ $rc -eq 0 ] && [ \$(wc -l <'$tmp/chat.out') -eq 3 ]"
check "stderr names the template file as Jinja" grep -q "^chat template: $tmpl (Jinja)" "$tmp/chat.err"
check "three turns fed" test "$(wc -l <"$tmp/got")" -eq 3
check "turn 1 feeds BOS and the whole render, with the template's default system message" \
  test "$(sed -n 1p "$tmp/got")" = "$(cat "$tmp/want1")"
check "turn 2 feeds only the new user message and the generation prompt" test "$(sed -n 2p "$tmp/got")" = "$(cat "$tmp/want2")"
check "turn 3 likewise" test "$(sed -n 3p "$tmp/got")" = "$(cat "$tmp/want3")"
check "the first turn's text is shown" grep -qF 'prompt text: "<|im_start|>system\nYou are a helpful AI assistant named SmolLM' "$tmp/chat.err"
# A template that raises on a message is an error naming its line, not a crash.
printf '{{ raise_exception("no chatting today") }}' >"$tmp/bad.jinja"
echo hi | "$bin/slake-cli" -m "$gguf" -c 512 -cnv --chat-template-file "$tmp/bad.jinja" -n 4 >/dev/null 2>"$tmp/bad.err"
bad_rc=$?
check "a template's raise_exception ends the chat with its message and line" \
  bash -c "[ $bad_rc -ne 0 ] && grep -q 'error: .*bad.jinja line 1: no chatting today' '$tmp/bad.err'"
check_summary
