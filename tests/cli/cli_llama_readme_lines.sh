#!/usr/bin/env bash
# The launch lines of llama.cpp's own READMEs (0c1e570: tools/server/README.md and
# tools/completion/README.md), those that use only what slake has, run unchanged but for three
# substitutions: the program (llama-server -> slake-server, llama-completion -> slake-cli), the
# model path (the README's example file -> a test model) and, for the server, `--port 0 -t 1` added
# so that the test listens on a free port. Each must start (the server: answer a completion) and
# exit 0. llama.cpp enters a conversation for --chat-template and --jinja; slake-cli converses only
# with -cnv, so those lines answer their prompt (empty, or -p) once, through the template, and exit.
# Flags for what slake does not do are refused with one line that names the flag.
#   cli_llama_readme_lines.sh BIN_DIR SHARED_DIR
# Exits 77 when ../shared lacks stories260K. The lines that need the model's own chat template
# (--jinja) take a copy of stories260K given ChatML's by gguf-py's gguf-new-metadata (the
# project's venv; skipped without it): its 128-token context bounds their replies, which the
# README lines do not.
set -u
bin=$(cd "$1" && pwd)
stories=$2/models/stories260K.gguf
new_metadata=$(dirname "$0")/../../.venv/bin/gguf-new-metadata
stories_abs=$(cd "$(dirname "$stories")" 2>/dev/null && pwd)/stories260K.gguf
if [ ! -e "$stories" ]; then echo "skipped: shared material missing: $stories"; exit 77; fi
tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=../check_lib.sh
. "$(dirname "$0")/../check_lib.sh"

# The lines as the READMEs print them.
server_lines=(
  './llama-server -m models/7B/ggml-model.gguf -c 2048'
  'llama-server --models-dir ./models_directory'
  'llama-server --models-preset ./my-models.ini'
)
completion_lines=(
  './llama-completion -m models/gemma-1.1-7b-it.Q4_K_M.gguf -no-cnv --prompt "Once upon a time"'
  './llama-completion -m models/gemma-1.1-7b-it.Q4_K_M.gguf --chat-template gemma'
  './llama-completion -m models/gemma-1.1-7b-it.Q4_K_M.gguf --ignore-eos -n -1'
  './llama-completion -m models/gemma-1.1-7b-it.Q4_K_M.gguf --jinja'
  './llama-completion -m models/gemma-1.1-7b-it.Q4_K_M.gguf --jinja --single-turn -sys "You are a helpful assistant" -p "Hello"'
)

# The router's folder and preset (the README's preset, less the keys for what slake does not do:
# model-draft, and its example's paths).
mkdir -p "$tmp/models_directory"
ln -s "$stories_abs" "$tmp/models_directory/stories260K.gguf"
cat >"$tmp/my-models.ini" <<EOF
version = 1
[*]
c = 8192
n-gpu-layers = 8
[custom_model]
model = $stories_abs
chat-template = chatml
jinja = true
c = 4096
LLAMA_ARG_CACHE_RAM = 0
EOF

serve() {  # serve LINE MODEL_NAME: the line started, one completion asked of MODEL_NAME, stopped
  local line=$1 name=$2 port= text=
  line=${line/#.\/llama-server/$bin/slake-server}
  line=${line/#llama-server/$bin/slake-server}
  line=${line/models\/7B\/ggml-model.gguf/$stories_abs}
  (cd "$tmp" && eval "exec $line --port 0 -t 1" 2>"$tmp/server.err") &
  server_pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/server.err")
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -n "$port" ]; then
    text=$(python3 - "$port" "$name" <<'PY'
import json, sys, urllib.request
body = json.dumps({"model": sys.argv[2], "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as r:
    print(json.load(r)["choices"][0]["text"], end="")
PY
)
  fi
  kill "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
  check "$1: starts and answers" test -n "$text"
}
serve "${server_lines[0]}" stories260K.gguf
serve "${server_lines[1]}" stories260K
serve "${server_lines[2]}" custom_model

complete() {  # complete LINE MODEL: the line run with one line of standard input
  local line=$1 model=$2
  line=${line/#.\/llama-completion/$bin/slake-cli}
  line=${line/models\/gemma-1.1-7b-it.Q4_K_M.gguf/$model}
  printf 'Tell me a story.\n' | (eval "timeout 120 $line") >"$tmp/cli.out" 2>"$tmp/cli.err"
  local rc=$?
  # The lines give no seed: a reply drawn at random may be empty (an end token first), so what is
  # checked is that the line ran through to its generation and exited 0.
  check "$1: generates and exits 0" sh -c "test $rc -eq 0 && grep -q '^generation: [0-9]* tokens' '$tmp/cli.err'"
}
complete "${completion_lines[0]}" "$stories"
complete "${completion_lines[1]}" "$stories"
complete "${completion_lines[2]}" "$stories"
# stories260K's context is 128 tokens: a prompt of one token and 128 generated fill it. An end of
# text made likely (-l 2+20: EOS's logit raised) ends the greedy reply early, and --ignore-eos
# bans it again.
check "--ignore-eos -n -1 runs to the full context" grep -q "^generation: 128 tokens" "$tmp/cli.err"
"$bin/slake-cli" -m "$stories" -n -1 --temp 0 -l 2+20 </dev/null >/dev/null 2>"$tmp/eos.err"
"$bin/slake-cli" -m "$stories" -n -1 --temp 0 -l 2+20 --ignore-eos </dev/null >/dev/null 2>"$tmp/noeos.err"
check "an end of text ends the reply early without --ignore-eos" sh -c "! grep -q '^generation: 128 tokens' '$tmp/eos.err'"
check "and not with it" grep -q "^generation: 128 tokens" "$tmp/noeos.err"
chatml='{% for m in messages %}{{ "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n" }}{% endfor %}'
chatml+='{% if add_generation_prompt %}{{ "<|im_start|>assistant\n" }}{% endif %}'
if [ -x "$new_metadata" ] && "$new_metadata" "$stories" "$tmp/templated.gguf" --chat-template "$chatml" >/dev/null 2>&1; then
  complete "${completion_lines[3]}" "$tmp/templated.gguf"
  complete "${completion_lines[4]}" "$tmp/templated.gguf"
  check "--jinja renders the model's own template" grep -q "chat template: the model's chat template (Jinja)" "$tmp/cli.err"
else
  echo "skipped: the --jinja lines (no $new_metadata: scripts/setup.sh makes the venv)"
fi

# What slake does not do is refused by name, in one line, by both tools.
for t in "slake-cli -m $stories -p x -r User: --in-prefix x:--in-prefix" "slake-cli -m $stories -p x --lora a.gguf:--lora" \
         "slake-server -m $stories --lora a.gguf --port 0:--lora" "slake-server -m $stories -md draft.gguf --port 0:-md"; do
  # shellcheck disable=SC2086
  timeout 30 "$bin"/${t%:*} >/dev/null 2>"$tmp/refused.err"
  rc=$?
  check "${t%:*}: refused ($rc), one line naming ${t##*:}" \
    sh -c "test $rc -ne 0 && test $rc -ne 124 && test \$(grep -c . '$tmp/refused.err') -eq 1 && grep -q -- '${t##*:}' '$tmp/refused.err'"
done
check_summary
