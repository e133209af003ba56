#!/usr/bin/env bash
# slake-cli --batch on bad flags and bad requests: a flag error stops before the model is loaded; a
# bad request gets an error response naming its line, and every later request is still answered.
# --kv-sweep: each setting's responses equal those of its own run, and a bad request is answered
# once per setting, on the cpu and (where built) on the cuda backend's host executor.
# Exits 77 (ctest's SKIP_RETURN_CODE) when ../shared lacks the model.
set -u
bin=$1
model=$2/models/stories260K.gguf
if [ ! -e "$model" ]; then echo "skipped: shared material missing: $model"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../check_lib.sh
. "$(dirname "$0")/../check_lib.sh"

flag_error() {  # flag_error EXPECTED_MESSAGE ARGS...: exit 1, one "error:" line with the message, nothing on stdout
  local msg=$1; shift
  "$bin/slake-cli" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq 1 ] && [ ! -s "$tmp/out" ] && grep -qF -- "error: $msg" "$tmp/err" ||
    { echo "  slake-cli $* -> exit $rc, stderr: $(head -c 300 "$tmp/err")"; return 1; }
}

check "--batch with -p" flag_error "--batch takes its prompts from the requests" -m "$model" --batch - -p hi
check "--batch with -cnv" flag_error "--batch takes its prompts from the requests; it cannot be combined with -p, -f or -cnv" -m "$model" --batch - -cnv
check "--batch with --temp 0.8" flag_error "--batch decodes greedily; --temp must be <= 0" -m "$model" --batch - --temp 0.8
check "--batch-out alone" flag_error "--batch-out needs --batch" -m "$model" --batch-out "$tmp/x"
check "missing request file" flag_error "$tmp/none.jsonl: cannot open the batch requests" -m "$model" -c 512 --batch "$tmp/none.jsonl"
check "unwritable --batch-out" flag_error "$tmp/no/dir/out.jsonl: cannot write the batch responses" -m "$model" -c 512 \
  --batch - --batch-out "$tmp/no/dir/out.jsonl"

# The request file: one line each, two of them blank (skipped) and one not UTF-8.
printf '%s\n' \
  '{not json' \
  '[1, 2]' \
  '{"id": 1}' \
  '{"id": 2, "prompt": "Hi", "temperature": 1}' \
  '{"id": 3, "prompt": 7}' \
  '{"id": 4, "prompt": "Hi", "max_new_tokens": "many"}' \
  '' \
  '   ' \
  "$(printf '\xff\xfe')" \
  '{"id": 5, "prompt": "Hi", "max_new_tokens": -2}' \
  '{"id": 6, "prompt": "Hi", "truncate_tokens": 1}' \
  '{"id": 7, "prompt": "Hi", "stop": "\n"}' \
  '{"id": 8, "prompt": "Hi", "stop": [""]}' \
  '{"id": 9, "prompt": "Hi", "chat": "yes"}' \
  '{"id": 10, "prompt": "Hi", "chat": true}' \
  "{\"id\": 11, \"prompt\": \"$(printf 'Lily went to the park. %.0s' $(seq 1 40))\"}" \
  '{"id": 12, "prompt": "Once upon a time", "max_new_tokens": 5}' >"$tmp/req.jsonl"
# The error of each line, as slake-cli reports it on stderr ("" for a good request).
expected=(
  [1]="invalid JSON"
  [2]="a request must be a JSON object"
  [3]='missing field "prompt"'
  [4]='unknown field "temperature"'
  [5]='"prompt" must be a string, got 7'
  [6]='"max_new_tokens" must be an integer, got "many"'
  [9]="invalid JSON"
  [10]='"max_new_tokens" must be an integer >= -1, got -2'
  [11]='"truncate_tokens" must be 0 (off) or >= 2, got 1'
  [12]='"stop" must be an array of strings'
  [13]='"stop"[0] is empty'
  [14]='"chat" must be true or false'
  [15]="the model has no chat template; choose one with --chat-template NAME"
  [16]="the prompt is 362 tokens, more than the context holds (-c 128)"  # as tests/longbench/spm_reference.py counts it
)
"$bin/slake-cli" -m "$model" -c 128 --batch "$tmp/req.jsonl" >"$tmp/resp.jsonl" 2>"$tmp/err"
rc=$?
check "exit 0 after bad requests" [ "$rc" -eq 0 ]
check "one response per non-blank line" [ "$(wc -l <"$tmp/resp.jsonl")" -eq 15 ]
for line in "${!expected[@]}"; do
  check "line $line: ${expected[$line]:0:60}" grep -qF -- "batch: request line $line: ${expected[$line]}" "$tmp/err"
done
check "responses in order, each error naming its line" \
  [ "$(grep -o '"error":"request line [0-9]*' "$tmp/resp.jsonl" | grep -o '[0-9]*$' | tr '\n' ' ')" = "${!expected[*]} " ]
check "the good request after all the bad ones generates" grep -q '"id":12,.*"n_gen":5' "$tmp/resp.jsonl"
check "ids given back" [ "$(grep -c '"id":null' "$tmp/resp.jsonl")" -eq 3 ]
check "a summary on stderr" grep -q "batch: 15 requests, 14 failed" "$tmp/err"

check "--kv-sweep without --batch" flag_error "--kv-sweep needs --batch" -m "$model" -p hi --kv-sweep cake/none/64
check "--kv-sweep with a bad setting" flag_error "--kv-sweep: 'cake/64' is not POLICY/COMPENSATOR/BUDGET" -m "$model" \
  --batch - --kv-sweep full/none/0,cake/64
check "--kv-sweep with a bad policy" flag_error "unknown KV policy 'nope'" -m "$model" --batch - --kv-sweep nope/none/64

# The sweep against one run per setting: prompts long enough to evict at prefill (about 140
# tokens, budgets of 48 and 64), replies long enough to evict in decode, a stop string, and a
# request that fails.
story=$(printf 'Lily went to the park. She saw a big dog. %.0s' $(seq 1 8))
printf '%s\n' \
  "{\"id\": \"a\", \"prompt\": \"$story\", \"max_new_tokens\": 60}" \
  "{\"id\": \"b\", \"prompt\": \"Once upon a time, $story\", \"max_new_tokens\": 40, \"stop\": [\".\"]}" \
  '{"id": "c", "prompt": 5}' \
  "{\"id\": \"d\", \"prompt\": \"$story The dog\", \"max_new_tokens\": 0}" >"$tmp/sweep.jsonl"
sweep() {  # sweep NAME REQUESTS SETTINGS CLI ARGS...: the sweep's responses and each setting's own run's into $tmp/NAME*
  local name=$1 requests=$2 settings=$3 cli=$4; shift 4
  "$cli" -m "$model" --kv-window 8 -t 2 --batch "$requests" --kv-sweep "$settings" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || { cat "$tmp/$name.err"; return 1; }
  IFS=, read -r -a list <<<"$settings"
  for s in "${list[@]}"; do  # each run must exit 0 as the sweep did; its output is named by the whole setting
    IFS=/ read -r policy comp budget <<<"$s"
    "$cli" -m "$model" --kv-window 8 -t 2 --batch "$requests" --kv-policy "$policy" --kv-compensate "$comp" --kv-budget "$budget" "$@" \
      >"$tmp/$name-alone-$policy-$comp-$budget.out" 2>"$tmp/$name-alone.err" || { cat "$tmp/$name-alone.err"; return 1; }
  done
}
same_as_alone() {  # same_as_alone NAME SETTINGS: each setting's lines of the sweep, in order, equal its own run's but for timings and "kv"
  python3 - "$tmp" "$2" "$1" <<'PY'
import json, sys
tmp, settings, name = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
sweep = [json.loads(l) for l in open(f"{tmp}/{name}.out")]
assert len(sweep) % len(settings) == 0 and sweep, len(sweep)
drop = ("prefill_s", "decode_s", "kv")
for i, s in enumerate(settings):
    policy, comp, budget = s.split("/")
    mine = sweep[i::len(settings)]
    assert all(r["kv"]["policy"] == policy and r["kv"]["budget"] == int(budget) for r in mine), mine
    alone = [json.loads(l) for l in open(f"{tmp}/{name}-alone-{policy}-{comp}-{budget}.out")]
    assert [{k: v for k, v in r.items() if k not in drop} for r in mine] == \
           [{k: v for k, v in r.items() if k not in drop} for r in alone], (s, mine, alone)
assert len({r["text"] for r in sweep[:len(settings)]}) > 1, "the settings should not all reply alike"
PY
}
settings="full/none/0,cake/none/48,slake/auto/48,h2o/centroids/64,slake-wide/none/64"
check "--kv-sweep exits 0" sweep sweep "$tmp/sweep.jsonl" "$settings" "$bin/slake-cli" -c 256
check "--kv-sweep: each setting's responses are its own run's" same_as_alone sweep "$settings"
check "--kv-sweep: request a decodes 60 tokens in each setting, c fails in each" python3 - "$tmp/sweep.out" <<'PY'
import json, sys
sweep = [json.loads(l) for l in open(sys.argv[1])]
assert len(sweep) == 4 * 5, len(sweep)
assert [r["n_gen"] for r in sweep[:5]] == [60] * 5
assert all("error" in r for r in sweep[10:15])
PY
# The same on the cuda backend through the host executor (slow: a short prompt that still evicts,
# a short reply): each prompt on its own, the settings' decode steps in one batch.
if [ -x "$bin/slake-cli-emu" ]; then
  short=$(printf 'Lily went to the park. She saw a big dog. %.0s' 1 2 3 4)
  printf '%s\n' "{\"id\": \"a\", \"prompt\": \"$short\", \"max_new_tokens\": 12}" >"$tmp/sweep-cuda.jsonl"
  settings="full/none/0,cake/none/24,snapkv/none/32"
  check "--kv-sweep --backend cuda exits 0" sweep cuda "$tmp/sweep-cuda.jsonl" "$settings" "$bin/slake-cli-emu" -c 96 --backend cuda
  check "--kv-sweep --backend cuda: each setting's responses are its own run's" same_as_alone cuda "$settings"
fi

check_summary
