#!/usr/bin/env bash
# Bad flags and files given to slake-server: a non-zero exit and one "error:" line (or CLI11's
# message for a malformed flag) before anything listens, never a crash. Uses the fixture model of
# tests/fixtures (no ../shared needed).
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../check_lib.sh
. "$(dirname "$0")/../check_lib.sh"
model=$(dirname "$0")/../fixtures/models/llama2-mha/model.gguf

fails_with() {  # fails_with PATTERN ARGS...
  local pattern=$1; shift
  timeout 20 "$bin/slake-server" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  echo "  exit $rc: $(head -n 1 "$tmp/err")"
  [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -q -- "$pattern" "$tmp/err"
}

check "no model" fails_with "give -m MODEL, or --models-dir" --port 0
check "-m with --models-dir" fails_with "give one or the other" -m "$model" --models-dir /tmp --port 0
check "a missing model file" fails_with "error: /nonexistent.gguf: no such file" -m /nonexistent.gguf --port 0
check "an unknown KV policy" fails_with "error: .*nope" -m "$model" --kv-policy nope --port 0
check "-np 0" fails_with "parallel" -m "$model" -np 0 --port 0
check "-c too small to split over the slots" fails_with "leaves none a token" -m "$model" -c 3 -np 4 --port 0
check "a port out of range" fails_with "port" -m "$model" --port 70000
check "both template flags" fails_with "error: --chat-template and --chat-template-file" -m "$model" \
  --chat-template chatml --chat-template-file /dev/null --port 0
check "an unknown built-in template" fails_with "error: unknown chat template 'nope'" -m "$model" --chat-template nope --port 0
check "a missing template file" fails_with "error: .*/nonexistent.jinja" -m "$model" --chat-template-file /nonexistent.jinja --port 0
check "an address that is not this host's" fails_with "error: cannot listen on 192.0.2.1" -m "$model" --host 192.0.2.1 --port 8080
check_summary
